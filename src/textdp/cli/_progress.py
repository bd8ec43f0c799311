"""The CLI's progress display (rich), in its own module so that ``textdp --help`` and
commands that never show a bar do not import ``rich.progress``; see
:func:`textdp.cli._common.progress`."""

from __future__ import annotations

from rich.progress import Progress, ProgressColumn
from rich.table import Column
from rich.text import Text

__all__ = ["ErrorClearingProgress", "CountColumn"]


class ErrorClearingProgress(Progress):
    """A progress display that removes itself when the block fails, so an error is one line
    (no half-drawn "0/?" bar above it)."""

    _failed = False

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None:
            self.live.transient = True
            self._failed = True
        return super().__exit__(exc_type, exc_val, exc_tb)

    def stop(self) -> None:
        if self._failed and not self.disable:  # rich ends a non-terminal display with an empty line:
            self.live.stop()                    # not above the one-line error
            return
        super().stop()


class CountColumn(ProgressColumn):
    """``done/total``: exact below a million ("3/20"), else in the total's unit ("100.5M/301.4M"), so the
    counter stays short enough to be printed whole in an 80-column terminal or log."""

    _UNITS = ((10**12, "T"), (10**9, "G"), (10**6, "M"))

    def __init__(self):
        super().__init__(table_column=Column(no_wrap=True))  # never squeezed: the bar and description give way

    @classmethod
    def text(cls, completed: float, total: float | None) -> str:
        done = max(0, int(completed))
        if total is None:
            return f"{done}/?"
        total = max(0, int(total))
        for k, unit in cls._UNITS:
            if total >= k:
                t = f"{total / k:.1f}{unit}"
                return f"{f'{done / k:.1f}{unit}':>{len(t)}}/{t}"
        return f"{done:{len(str(total))}d}/{total}"

    def render(self, task) -> Text:
        return Text(self.text(task.completed, task.total), style="progress.download")
