"""The closing-note table of the hardening work: bad inputs tried, clean, and every other outcome by class.

Runs the fuzz suite's cases (tests/fuzz/fuzz_cases.py) in this process, in order, without hypothesis:
every CLI subcommand with each extreme value in each option, malformed configs, and every public function
with each bad value in each argument, corrupt token stores (deleted, truncated, flipped chunks; a manifest that
disagrees with the arrays; offsets out of order) read by verify / analyze-padding / pipeline, and pretokenize onto
a full disk (a 2 MiB tmpfs when it can be mounted, else a simulated ENOSPC; clean there means exit 1).
"clean" means exit status 2 with one line on stderr and no traceback
(CLI), or a ValueError / TypeError / IndexError with a one-line message (library). Files that are wrong in
content or layout (symlink cycles and links to '..', alias bombs under the old alias cap, duplicate keys, NumPy
directories with bad ids or disagreeing arrays, inputs of zero documents) must give their right status (0 with
the right document count, or 2 with one line naming the file) and change nothing; unreadable or unwritable files,
run as a non-root user (uid 65534 via setpriv when run as root), must give exit 1 with one line naming the file.
Issue 36's cases (tests/fuzz/issue36_cases.py), each in a child process with its time and peak memory measured:
a tokenizer whose regex panics in Rust, an S3 endpoint that accepts and never answers (<= 30 s), a manifest that
is a link to /dev/urandom or 8 GiB long, a 300 MB Parquet cell (< 1 GiB), a 50 MB line through pretokenize
(< 1 GiB), edited plan files (exit 2 naming the file), a user's file in a store under --overwrite (kept), the
rerun of the same job on a damaged store (repaired byte-identical), 9 kinds of damage each repaired by the very
command its error names, a chunk swapped / from another store / rewritten through tensorstore (pipeline: exit 2
naming it), --overwrite at an S3 bucket root holding other objects (refused, every object kept) and a store at a
bucket root replaced within it (a moto server), stores of two tokenizers mixed (refused), token ids of 2^40
(refused), weights near 1e308 (their ratios) and --workers 64 (capped, with the reason).

    python scripts/fuzz_report.py [--skip-issue36 | --only-issue36]
"""

from __future__ import annotations

import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "fuzz")]

from fuzz_cases import (  # noqa: E402
    ALLOWED,
    BAD_CONFIGS,
    BAD_TRAIN_CONFIGS,
    CORRUPT_STORES,
    LENGTHS_UNAFFECTED,
    accepted_outcome,
    cli_cases,
    corrupt_store_commands,
    disk_full_outcome,
    file_case_outcome,
    file_cases,
    function_cases,
    listing_with_sizes,
    make_world,
    permission_cases,
    run_as_user,
    run_cli,
)
from issue36_cases import issue36_cases  # noqa: E402


def main() -> int:
    outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    only36 = "--only-issue36" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = make_world(tmp)
        if only36:
            _issue36(outcomes, tmp, store)
            return _table(outcomes)
        for args in cli_cases(str(store), str(tmp)):
            status, out, err = run_cli(args)
            err = "".join(
                line
                for line in err.splitlines(keepends=True)  # warnings come as lines of their own
                if not line.startswith("datatools: warning: ")
            )
            one_line = err.count("\n") == 1 and "Traceback" not in err
            kind = (
                accepted_outcome(args, out, store)
                if status == 0
                else "clean (exit 2, one line)"
                if status == 2 and one_line
                else f"exit {status}: {err.split(':')[2].strip() if err.count(':') > 2 else err[:40]}"
            )
            outcomes[f"CLI: {args[0]}"][kind] += 1
        for text in BAD_CONFIGS + BAD_TRAIN_CONFIGS:
            (tmp / "c.yaml").write_text(text.replace("STORE", str(store)))
            command = "train" if text in BAD_TRAIN_CONFIGS else "pipeline"
            status, _, err = run_cli([command, str(tmp / "c.yaml"), "--steps", "1"])
            clean = status == 2 and err.count("\n") == 1 and "Traceback" not in err
            outcomes[f"CLI: {command} (malformed config)"][
                "clean (exit 2, one line)" if clean else f"exit {status}"
            ] += 1
        for damage in CORRUPT_STORES:  # issue 21: a damaged store is refused, naming it, by every reader
            copy, commands = corrupt_store_commands(store, tmp, damage)
            for args in commands:
                status, out, err = run_cli(args)
                clean = status == 2 and err.count("\n") == 1 and "Traceback" not in err and copy in err
                kind = (
                    "clean (exit 2, one line naming the store)"
                    if clean
                    else accepted_outcome(args, out, store)  # lengths from intact offsets: the store's counts
                    if status == 0 and args[0] == "analyze-padding" and damage in LENGTHS_UNAFFECTED
                    else f"exit {status} on a corrupt store"
                )
                outcomes[f"CLI: {args[0]} (corrupt store)"][kind] += 1
        for case in file_cases(store, tmp):  # issue 21: symlinks, alias bombs, duplicate keys, NumPy dirs, empty inputs
            before = listing_with_sizes(tmp / "files")
            t0 = time.perf_counter()
            status, out, err = run_cli(case["args"])
            kind = file_case_outcome(case, status, out, err, time.perf_counter() - t0)
            after = listing_with_sizes(tmp / "files")
            if any(after.get(k) != size for k, size in before.items()):
                kind = "changed or removed an existing file"
            command, what = case["name"].split(": ", 1)
            outcomes[f"CLI: {command} (files: {what.split(' (')[0]})"][kind] += 1
        base = Path(tempfile.mkdtemp(prefix="datatools-perm-", dir="/tmp"))
        try:  # as a non-root user: uid 65534 through setpriv when this runs as root
            cases = permission_cases(base, tmp / "tok.json")
            results = run_as_user([c["args"] for c in cases], base)
            for c, result in zip(cases, results if not isinstance(results, str) else [None] * len(cases)):
                kind = f"not run ({results})" if result is None else file_case_outcome(c, *result)
                outcomes[f"CLI: {c['name'].split(':')[0]} (permissions, non-root)"][kind] += 1
        finally:
            for p in [base, *base.rglob("*")]:
                if p.is_dir() and not p.is_symlink():
                    p.chmod(0o755)
            shutil.rmtree(base, ignore_errors=True)
        how, status, err, left = disk_full_outcome(tmp)
        last = err.splitlines()[-1] if err else ""  # progress lines (off a terminal) may come before it
        clean = (
            status == 1
            and last.startswith("datatools: error:")
            and "No space left on device" in last
            and "Traceback" not in err
            and not left
        )
        outcomes[f"CLI: pretokenize (disk full, {how})"][
            "clean (exit 1, one line)" if clean else f"exit {status}: {err[:60]}"
        ] += 1
        if "--skip-issue36" not in sys.argv:
            _issue36(outcomes, tmp, store)
    for name, thunk in function_cases():
        try:
            thunk()
            kind = "unchecked: returned (no reference)"
        except ALLOWED as exc:
            kind = (
                f"clean ({type(exc).__name__})"
                if "\n" not in str(exc) and len(str(exc)) < 1000
                else f"{type(exc).__name__} with a long message"
            )
        except Exception as exc:  # noqa: BLE001 -- this is what the report counts
            kind = f"{type(exc).__name__}"
        outcomes[f"library: {name.split()[0]}"][kind] += 1

    return _table(outcomes)


def _issue36(outcomes: dict[str, collections.Counter], tmp: Path, store: Path) -> None:
    """Issue 36's cases (tests/fuzz/issue36_cases.py), each in measured child processes, into ``outcomes``."""
    from conftest import stdlib_texts

    for where, run in issue36_cases(tmp, store, tmp / "tok.json", stdlib_texts(2)):
        t0 = time.perf_counter()
        try:
            kind = run()
        except Exception as exc:  # noqa: BLE001 -- a case that cannot be set up is reported, not hidden
            kind = f"case failed to run ({type(exc).__name__}: {str(exc)[:60]})"
        outcomes[f"issue 36: {where}"][kind] += 1
        print(f"{where}: {kind} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)


def _table(outcomes: dict[str, collections.Counter]) -> int:
    """Print the table of outcomes by where they were tried, then the headline, which counts only checked cases:
    a refusal checked for its status and its one line, or an answer (exit 0, a return) compared to a reference.
    An answer with no reference is listed as unchecked, never counted as clean. 1 when any checked case is not
    clean."""
    print("| where | tried | outcomes |")
    print("|---|---:|---|")
    total = collections.Counter()
    for where in sorted(outcomes):
        c = outcomes[where]
        total.update(c)
        print(f"| {where} | {sum(c.values())} | {', '.join(f'{k}: {v}' for k, v in sorted(c.items()))} |")
    print(f"| **all** | **{sum(total.values())}** | {', '.join(f'{k}: {v}' for k, v in sorted(total.items()))} |")
    unchecked = sum(v for k, v in total.items() if k.startswith("unchecked"))
    checked = {k: v for k, v in total.items() if not k.startswith("unchecked")}
    bad = {k: v for k, v in checked.items() if not k.startswith(("clean", "checked"))}
    wrong = sum(v for k, v in bad.items() if k.startswith(("wrong", "silently wrong")))
    tracebacks = sum(v for k, v in bad.items() if k == "traceback")
    hangs = sum(v for k, v in bad.items() if k.startswith(("took", "hung")))
    other = sum(bad.values()) - wrong - tracebacks - hangs  # a wrong status, an exception of another class, ...
    print(
        f"\n**checked: {sum(checked.values())}**: clean {sum(checked.values()) - sum(bad.values())}, silently wrong "
        f"{wrong}, tracebacks {tracebacks}, hangs or over their time bound {hangs}, other {other}; "
        f"unchecked (an answer with no reference): {unchecked}"
    )
    print(f"remaining exceptions by class: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
