"""``datatools warm``: compile datatools' numba kernels ahead (:mod:`datatools.pipeline.compile_ahead`), once after
an install, so the first pipeline does not spend its first seconds compiling."""

from __future__ import annotations

import click

from datatools.base.errors import RunFailed
from datatools.cli.common import make_console, result_console


@click.command("warm")
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=None,
    help="Processes compiling at once (default: the CPUs this process may use).",
)
def warm_command(jobs: int | None) -> None:
    """Compile the numba kernels of every pipeline, packer and report into numba's cache (NUMBA_CACHE_DIR, else
    beside the installed modules), in parallel processes: later commands load them in milliseconds."""
    from datatools.base.progress import count_progress
    from datatools.pipeline.compile_ahead import PARTS, warm

    with count_progress(make_console(stderr=True), len(PARTS), "compiling kernels (parts)") as advance:
        report = warm(jobs=jobs, done=lambda _part: advance())
    for part, error in report.failed.items():  # a kernel that does not compile here: exit 1, the environment
        raise RunFailed(f"warm: part {part} failed: {error} (please report it)")
    seconds = ", ".join(f"{p} {s:.1f} s" for p, s in report.part_seconds.items())
    result_console().print(
        f"compiled datatools' kernels in {report.seconds:.1f} s ({len(report.parts)} parts, {report.jobs} at a "
        f"time: {seconds})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
