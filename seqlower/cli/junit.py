"""JUnit XML for CI dashboards: one testcase per model, the one-line reason as the
failure (exit 1) or error (exit 2) message."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from seqlower.cli._common import EXIT_FAIL, EXIT_OK, write_text_atomically


@dataclass
class Case:
    name: str  # the model's path, as given
    code: int  # the model's exit code
    reason: str  # one line; empty when it passed
    seconds: float
    details: str = ""  # the human report, for the dashboard's "output" pane


def write_junit(path: Path, suite: str, cases: list[Case]) -> None:
    root = ET.Element("testsuites")
    failures = sum(c.code == EXIT_FAIL for c in cases)
    errors = sum(c.code not in (EXIT_OK, EXIT_FAIL) for c in cases)
    total = sum(c.seconds for c in cases)
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures),
                       errors=str(errors), skipped="0", time=f"{total:.3f}")
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=suite, name=c.name, time=f"{c.seconds:.3f}")
        if c.code == EXIT_FAIL:
            ET.SubElement(tc, "failure", message=c.reason, type="failure").text = c.details or c.reason
        elif c.code != EXIT_OK:
            ET.SubElement(tc, "error", message=c.reason, type="error").text = c.details or c.reason
        elif c.details:
            ET.SubElement(tc, "system-out").text = c.details
    ET.indent(root)
    write_text_atomically(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
