#!/usr/bin/env python3
"""The commit convention (CONTRIBUTING.md), checked on every commit since it was adopted:
a subject of at most 72 characters with no trailing full stop, a blank line, then a body
that says why. Exits 1 naming each commit that breaks it.

    scripts/commit-messages.py              # every commit after CONVENTION_BASE
    scripts/commit-messages.py --self-test  # shows the check refusing what it must

Whether a subject is in the imperative is left to review: no rule tells "Embed" from
"Embedded" without a dictionary."""

import subprocess
import sys

# The last commit before the convention held without exception; every later one is checked.
CONVENTION_BASE = "aea44f68ad21966641ce86d3dd27e93ad9c3a25d"
SUBJECT_MAX = 72


def problems(subject, body):
    """What is wrong with one message (its subject line and the rest), as sentences."""
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
    return found


def commits():
    known = subprocess.run(["git", "cat-file", "-e", f"{CONVENTION_BASE}^{{commit}}"],
                           capture_output=True).returncode == 0
    if known:
        span = [f"{CONVENTION_BASE}..HEAD"]
    else:
        print("!! commit-messages: the convention's base commit is not in this clone "
              "(a shallow clone?): only HEAD is checked", file=sys.stderr)
        span = ["-1", "HEAD"]
    out = subprocess.run(
        ["git", "log", "--format=%h%x00%B%x01", *span],
        check=True, capture_output=True, text=True,
    ).stdout
    for record in out.split("\x01"):
        record = record.strip("\n")
        if not record:
            continue
        sha, message = record.split("\x00", 1)
        subject, _, body = message.partition("\n")
        yield sha, subject, body


def self_test():
    assert problems("Fit each round's cost line", "\nWhy: the pooled fit hid it.\n") == []
    assert problems("x" * 73, "\nbody\n") == ["subject is 73 characters (at most 72)"]
    assert problems("Fix it.", "\nbody\n") == ["subject ends with a full stop"]
    assert problems("Fix it", "") == ["no body saying why"]
    assert problems("Fix it", "body right under\n") == ["no blank line between subject and body"]
    print("commit-messages self-test: a long subject, a full stop, a missing body and a "
          "missing blank line are each refused")


def main():
    self_test()
    if sys.argv[1:] == ["--self-test"]:
        return 0
    bad = 0
    checked = 0
    for sha, subject, body in commits():
        checked += 1
        for problem in problems(subject, body):
            bad += 1
            print(f"commit-messages: {sha} \"{subject}\": {problem}")
    if bad:
        return 1
    print(f"commit-messages: {checked} commits since {CONVENTION_BASE[:12]} follow CONTRIBUTING.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
