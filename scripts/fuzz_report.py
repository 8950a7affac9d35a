"""The closing-note table of the hardening work: bad inputs tried, clean, and every other outcome by class.

Runs the fuzz suite's cases (tests/fuzz/fuzz_cases.py) in this process, in order, without hypothesis:
every CLI subcommand with each extreme value in each option, malformed configs, and every public function
with each bad value in each argument. "clean" means exit status 2 with one line on stderr and no traceback
(CLI), or a ValueError / TypeError / IndexError with a one-line message (library).

    python scripts/fuzz_report.py
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "fuzz")]

from fuzz_cases import ALLOWED, BAD_CONFIGS, BAD_TRAIN_CONFIGS, cli_cases, function_cases, make_world, run_cli  # noqa: E402,E501


def main() -> int:
    outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = make_world(tmp)
        for args in cli_cases(str(store), str(tmp)):
            status, out, err = run_cli(args)
            one_line = err.count("\n") == 1 and "Traceback" not in err
            kind = "accepted (valid value)" if status == 0 else "clean (exit 2, one line)" if status == 2 and one_line \
                else f"exit {status}: {err.split(':')[2].strip() if err.count(':') > 2 else err[:40]}"
            outcomes[f"CLI: {args[0]}"][kind] += 1
        for text in BAD_CONFIGS + BAD_TRAIN_CONFIGS:
            (tmp / "c.yaml").write_text(text.replace("STORE", str(store)))
            command = "train" if text in BAD_TRAIN_CONFIGS else "pipeline"
            status, _, err = run_cli([command, str(tmp / "c.yaml"), "--steps", "1"])
            clean = status == 2 and err.count("\n") == 1 and "Traceback" not in err
            outcomes[f"CLI: {command} (malformed config)"]["clean (exit 2, one line)" if clean else f"exit {status}"] += 1
    for name, thunk in function_cases():
        try:
            thunk()
            kind = "accepted (valid value)"
        except ALLOWED as exc:
            kind = f"clean ({type(exc).__name__})" if "\n" not in str(exc) and len(str(exc)) < 1000 else \
                f"{type(exc).__name__} with a long message"
        except Exception as exc:  # noqa: BLE001: this is what the report counts
            kind = f"{type(exc).__name__}"
        outcomes[f"library: {name.split()[0]}"][kind] += 1

    print("| where | tried | outcomes |")
    print("|---|---:|---|")
    total = collections.Counter()
    for where in sorted(outcomes):
        c = outcomes[where]
        total.update(c)
        print(f"| {where} | {sum(c.values())} | {', '.join(f'{k}: {v}' for k, v in sorted(c.items()))} |")
    print(f"| **all** | **{sum(total.values())}** | {', '.join(f'{k}: {v}' for k, v in sorted(total.items()))} |")
    bad = {k: v for k, v in total.items() if not k.startswith(("clean", "accepted"))}
    print(f"\nremaining exceptions by class: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
