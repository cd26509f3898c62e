#!/usr/bin/env python3
"""The commit convention (CONTRIBUTING.md), checked on every commit since it was adopted:
a subject of at most 72 characters with no trailing full stop, a blank line, then a body
that says why, wrapped at 72 columns (checked from WRAP_BASE on: ten earlier bodies run
a few columns over). Exits 1 naming each commit that breaks it, and when the history
it checks is not in the clone.

    scripts/commit-messages.py              # every commit after CONVENTION_BASE
    scripts/commit-messages.py --self-test  # shows the check refusing what it must

Whether a subject is in the imperative is left to review: no rule tells "Embed" from
"Embedded" without a dictionary."""

import subprocess
import sys

# The last commit before the convention held without exception; every later one is checked.
CONVENTION_BASE = "aea44f68ad21966641ce86d3dd27e93ad9c3a25d"
SUBJECT_MAX = 72
# The last commit before body lines were held to 72 columns.
WRAP_BASE = "6461dba4c5fa8ae165c512f4abea2be796b0f29b"
BODY_MAX = 72


def problems(subject, body, wrapped=True):
    """What is wrong with one message (its subject line and the rest), as sentences;
    `wrapped`: whether its body lines are held to BODY_MAX columns."""
    found = []
    if len(subject) > SUBJECT_MAX:
        found.append(f"subject is {len(subject)} characters (at most {SUBJECT_MAX})")
    if subject.endswith("."):
        found.append("subject ends with a full stop")
    if not subject.strip():
        found.append("subject is empty")
    lines = body.split("\n")
    if lines and lines[0].strip():
        found.append("no blank line between subject and body")
    if not any(line.strip() for line in lines):
        found.append("no body saying why")
    if wrapped:
        # An indented line (a command, a table) or one unbreakable token (a URL) may run on.
        long = [line for line in lines if len(line) > BODY_MAX
                and not line.startswith(" ") and " " in line.strip()]
        if long:
            found.append(f"{len(long)} body line(s) over {BODY_MAX} columns: {long[0][:40]}…")
    return found


def commits():
    for base in (CONVENTION_BASE, WRAP_BASE):
        known = subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"],
                               capture_output=True).returncode == 0
        if not known:
            sys.exit(f"commit-messages: {base[:12]} is not in this clone (a shallow clone?): "
                     "fetch the history (git fetch --unshallow) to check it")
    wrapped = set(subprocess.run(
        ["git", "rev-list", f"{WRAP_BASE}..HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.split())
    out = subprocess.run(
        ["git", "log", "--format=%H%x00%B%x01", f"{CONVENTION_BASE}..HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout
    for record in out.split("\x01"):
        record = record.strip("\n")
        if not record:
            continue
        sha, message = record.split("\x00", 1)
        subject, _, body = message.partition("\n")
        yield sha[:12], subject, body, sha in wrapped


def self_test():
    assert problems("Fit each round's cost line", "\nWhy: the pooled fit hid it.\n") == []
    assert problems("x" * 73, "\nbody\n") == ["subject is 73 characters (at most 72)"]
    assert problems("Fix it.", "\nbody\n") == ["subject ends with a full stop"]
    assert problems("Fix it", "") == ["no body saying why"]
    assert problems("Fix it", "body right under\n") == ["no blank line between subject and body"]
    long = "\n" + "word " * 16 + "\n"
    assert problems("Fix it", long, wrapped=False) == []
    assert len(problems("Fix it", long)) == 1
    assert problems("Fix it", "\nWhy.\n    target/release/x --a-long-command " + "y" * 60) == []
    print("commit-messages self-test: a long subject, a full stop, a missing body, a "
          "missing blank line and a body line over 72 columns are each refused")


def main():
    self_test()
    if sys.argv[1:] == ["--self-test"]:
        return 0
    bad = 0
    checked = 0
    for sha, subject, body, wrapped in commits():
        checked += 1
        for problem in problems(subject, body, wrapped):
            bad += 1
            print(f"commit-messages: {sha} \"{subject}\": {problem}")
    if bad:
        return 1
    print(f"commit-messages: {checked} commits since {CONVENTION_BASE[:12]} follow CONTRIBUTING.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
