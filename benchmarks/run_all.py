"""Run every benchmark in this folder (``make bench``); each prints its own comparison."""

import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).parent
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name} ===", flush=True)
    rc = subprocess.call([sys.executable, str(script)])
    if rc:
        failed.append(script.name)
print("\nfailed:", ", ".join(failed) if failed else "none")
sys.exit(1 if failed else 0)
