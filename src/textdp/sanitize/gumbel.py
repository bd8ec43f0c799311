"""(being built for issue 15: see /work/notes/i15/plan.md)"""

REGISTERED: tuple = ()
