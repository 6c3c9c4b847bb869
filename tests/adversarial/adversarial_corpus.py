"""Hostile inputs shared by the adversarial tests, and the tally of what they did.

Every outcome is one of:
- `clear`: refused with an error of torchsmith's own types whose first line says what and where;
- `accepted`: taken as valid (a legal input, or a hostile name that was escaped);
- `crash`: any other exception (a bare KeyError, RecursionError, a hang...);
- `wrong`: user text ran or landed in generated source as code, or results differ from eager.
"""

import collections

from torchsmith.inductor.errors import InductorError
from torchsmith.ir import IRError

OUR_ERRORS = (IRError, InductorError)
TALLY: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
MAX_FIRST_LINE = 600


def payloads(marker: str) -> list[str]:
    """Names that would run code creating `marker` if pasted into C++ or Python source as is."""
    cpp = f'extern "C" int system(const char*); static int pwn = system("touch {marker}");'
    py = f"import os; os.system('touch {marker}')"
    return [
        f"x\n{cpp}\n//",
        f"x\r{cpp}\r//",
        f"x\\\n{cpp}",  # a line splice continues a // comment, then the code
        f"x */ {cpp} /*",
        f"x\n{py}\n#",
        f"x\r{py}\r#",
        f"x\x0c\n{py}",
        f"x\u2028{py}",
        f"x\x85{py}",
        f"x\x00{py}",
        f"x??/\n{cpp}",
        f'x"; {py}; "',
        f"x'''; {py}; '''",
        "x" * 5000 + f"\n{py}",
        f"x // @torchsmith-kernel\n{cpp}",  # the marker the C++ builder splits units at
    ]


def outcome(category: str, fn, *, bad: bool = True) -> str:
    """Run `fn()` and tally how it ended. `bad`: the input is invalid, so accepting it is wrong."""
    try:
        fn()
    except OUR_ERRORS as e:
        first = (str(e).splitlines() or [""])[0]
        result = "clear" if first and len(first) <= MAX_FIRST_LINE else "crash"
    except Exception as e:  # anything else is a crash, reported with its type
        result = "crash"
        outcome.last_crash = e
    else:
        result = "accepted"
    TALLY[category]["tried"] += 1
    TALLY[category][result] += 1
    return result


def record(category: str, result: str) -> None:
    TALLY[category]["tried"] += 1
    TALLY[category][result] += 1


def format_tally() -> str:
    rows = [f"{'category':<34} {'tried':>6} {'clear':>6} {'accepted':>9} {'crash':>6} {'wrong':>6}"]
    for category in sorted(TALLY):
        c = TALLY[category]
        counts = f"{c['tried']:>6} {c['clear']:>6} {c['accepted']:>9} {c['crash']:>6} {c['wrong']:>6}"
        rows.append(f"{category:<34} {counts}")
    return "\n".join(rows)


def code_lines_holding(source: str, token: str, comment: str) -> list[str]:
    """Lines of `source` holding `token` that are not comments starting with `comment`, or string
    literals: user text outside a comment is code."""
    bad = []
    for line in source.splitlines():
        if token in line and not line.lstrip().startswith(comment):
            bad.append(line)
    return bad
