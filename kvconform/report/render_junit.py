"""JUnit XML of a report (``conformance.junit.xml``) for CI test views, with figures as properties.

One ``testcase`` per result (classname ``kvconform.<model>``, name the pytest test id). A result that
did not pass carries ``measured``/``limit`` (display text), ``measured_value``/``limit_value``/``unit``/
``bound``/``ratio`` (numbers), ``outcome`` and, for known failures, ``reason`` and ``xfail_kind``; a
pass with a figure carries only :data:`PASS_PROPERTIES` (its numbers). Only failures, xpasses, errors
and crashes carry their message in full (``<failure>``/``<error>``); known failures are
``<skipped type="xfail">`` with their reason (their message is in the JSON); checks
that never ran are one skipped testcase per reason, and an incomplete run is one ``<error type="incomplete">``
testcase, so a CI test view does not show a stopped run as green.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

from kvconform.report import views
from kvconform.report.document import Doc
from kvconform.run_status import incomplete_line

#: Characters XML 1.0 cannot hold (control characters such as ANSI escapes).
_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return _NOT_XML.sub("", text)


#: The properties of a passing testcase with a figure: its two numbers (the display texts, unit, bound and
#: ratio are in the JSON).
PASS_PROPERTIES = ("measured_value", "limit_value")


def _properties(result: dict[str, Any]) -> dict[str, Any]:
    figure = result.get("figure") or {}
    props: dict[str, Any] = {"outcome": result["outcome"], "measured": result.get("measured", ""),
                             "limit": result.get("limit", "")}
    if figure:
        props |= {"measured_value": figure["measured"], "limit_value": figure["limit"], "unit": figure["unit"],
                  "bound": figure["bound"], "ratio": figure["ratio"]}
    for key in ("reason", "xfail_kind"):
        if result.get(key):
            props[key] = result[key]
    if result.get("nonfinite"):
        props["nonfinite"] = ", ".join(result["nonfinite"])
    if result["outcome"] == "pass" and figure and not result.get("nonfinite"):
        return {key: props[key] for key in PASS_PROPERTIES}
    return props


def _testcase(parent: ET.Element, result: dict[str, Any]) -> str:
    """Add one result's testcase; return its outcome."""
    nodeid = result.get("nodeid") or f"test_{result['check']}[{result['cell_id']}]"
    case = ET.SubElement(parent, "testcase", classname=f"kvconform.{result['model']}", name=_text(nodeid.split("::")[-1]),
                         time=f"{result.get('duration_s') or 0:.4f}")
    props = ET.SubElement(case, "properties")
    for name, value in _properties(result).items():
        ET.SubElement(props, "property", name=name, value=_text(value))
    outcome, message = result["outcome"], _text(result.get("message", ""))
    if outcome in ("fail", "xpass"):
        head = f"XPASS: {result.get('reason', '')}" if outcome == "xpass" else views.diagnosis(result)
        ET.SubElement(case, "failure", type=outcome, message=_text(head)).text = message
    elif outcome in ("error", "crashed"):
        ET.SubElement(case, "error", type=outcome, message=_text(views.diagnosis(result))).text = message
    elif outcome == "xfail":
        ET.SubElement(case, "skipped", type="xfail", message=_text(result.get("reason", "")))
    return outcome


def render_junit(doc: Doc) -> str:
    """The report as one JUnit ``<testsuites>`` document (deterministic for a given document)."""
    root = ET.Element("testsuites", name="kvconform")
    suite = ET.SubElement(root, "testsuite", name="kvconform")
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for result in views.sorted_results(doc):
        outcome = _testcase(suite, result)
        kind = {"fail": "failures", "xpass": "failures", "error": "errors", "crashed": "errors", "xfail": "skipped"}.get(outcome)
        if kind:
            counts[kind] += 1
    for group in doc.get("not_run", []):
        case = ET.SubElement(suite, "testcase", classname="kvconform.not_run", name=_text(f"not run: {group['reason']}"), time="0")
        props = ET.SubElement(case, "properties")
        for name in ("cells", "checks"):
            ET.SubElement(props, "property", name=name, value=str(group[name]))
        ET.SubElement(case, "skipped", type="not_run", message=_text(group["reason"]))
        counts["skipped"] += 1
    incomplete = incomplete_line(doc)
    if incomplete:
        case = ET.SubElement(suite, "testcase", classname="kvconform.run", name="incomplete run", time="0")
        ET.SubElement(case, "error", type="incomplete", message=_text(incomplete))
        counts["errors"] += 1
    total = len(suite)
    duration = sum(r.get("duration_s") or 0 for r in doc.get("results", []))
    for element in (root, suite):
        element.set("tests", str(total))
        element.set("time", f"{duration:.4f}")
        for key, value in counts.items():
            element.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
