"""Compare what the runners observed on Apache RocketMQ and on our broker.

    .venv/bin/python tests/conformance/compare.py APACHE.json OURS.json
        [--markdown FILE] [--langs python,node,java,go]

Each scenario's ``compare`` rules (scenarios.json) say how each observed field
is compared: ``exact`` (equal on both, once the run's resource names are
replaced by their roles and error texts dropped), ``{"range": [lo, hi]}`` (each
side within it; numbers, or lists of numbers) or ``ignore``. A difference is
*explained* when ``differences.json`` lists it (scenario, field, languages)
with its reason. Exit status 1 when any difference is unexplained, or when a
scenario ran on one side and failed on the other.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCENARIOS = {
    s["id"]: s for s in json.loads((HERE / "scenarios.json").read_text())["scenarios"]
}
DIFFERENCES = json.loads((HERE / "differences.json").read_text())
_NAME = re.compile(r"c[a-z]{2}[0-9a-f]{6}_([a-z0-9_]+?)_([a-z]+)\b")


def normalize(v: Any) -> Any:
    """Resource names to ``<role>``, error texts dropped."""
    if isinstance(v, str):
        return _NAME.sub(lambda m: f"<{m.group(2)}>", v)
    if isinstance(v, list):
        return [normalize(x) for x in v]
    if isinstance(v, dict):
        skip = {"message"} if "outcome" in v else set()
        return {k: normalize(x) for k, x in v.items() if k not in skip}
    return v


def in_range(v: Any, lo: float, hi: float) -> bool:
    if isinstance(v, list):
        return all(in_range(x, lo, hi) for x in v)
    return isinstance(v, (int, float)) and lo <= v <= hi


def pinned(d: dict, value: Any) -> bool:
    """Whether our side's ``value`` is what the difference ``d`` says ours is:
    ``ours`` (that value), ``ours_in`` (one of those) or ``ours_range`` ([lo,
    hi]). An explanation that does not say what ours is explains nothing: the
    difference it covers could hide any regression of ours."""
    if "ours" in d:
        return bool(value == d["ours"])
    if "ours_in" in d:
        return value in d["ours_in"]
    if "ours_range" in d:
        lo, hi = d["ours_range"]
        return in_range(value, lo, hi)
    return False


def explanation(sid: str, field: str, lang: str, ours: Any) -> str | None:
    """The id of the difference that explains ``field`` of ``sid`` on ``lang``
    with our value ``ours`` (a whole scenario: ``whole_scenario``)."""
    for d in DIFFERENCES["differences"]:
        if (
            d["scenario"] == sid
            and d["field"] in (field, "*")
            and (d.get("languages", "*") == "*" or lang in d["languages"])
            and pinned(d, ours)
        ):
            return str(d["id"])
    return None


def whole_scenario(sid: str, lang: str, o: dict | None) -> str | None:
    """A scenario that Apache could not run, explained as a whole (``*``):
    ours must have run it (``ours_status``) and meet the scenario's ranges and
    the difference's ``ours_fields`` on its own."""
    for d in DIFFERENCES["differences"]:
        if not (
            d["scenario"] == sid
            and d["field"] == "*"
            and (d.get("languages", "*") == "*" or lang in d["languages"])
        ):
            continue
        if (o or {}).get("status") != d.get("ours_status"):
            return None
        observed = normalize((o or {}).get("observed") or {})
        for field, rule in SCENARIOS[sid]["compare"].items():
            if isinstance(rule, dict) and not in_range(
                observed.get(field), *rule["range"]
            ):
                return None
        for field, value in d.get("ours_fields", {}).items():
            if observed.get(field) != value:
                return None
        return str(d["id"])
    return None


def compare_one(sid: str, lang: str, a: dict | None, o: dict | None) -> dict:
    """One scenario on one language: verdict and the differing fields."""
    sa = (a or {}).get("status", "missing")
    so = (o or {}).get("status", "missing")
    out: dict[str, Any] = {
        "scenario": sid,
        "lang": lang,
        "apache": sa,
        "ours": so,
        "fields": [],
    }
    if sa != "ok" or so != "ok":
        why = [
            f"Apache: {sa} ({(a or {}).get('reason') or (a or {}).get('error')})"
            if sa != "ok"
            else "",
            f"ours: {so} ({(o or {}).get('reason') or (o or {}).get('error')})"
            if so != "ok"
            else "",
        ]
        out["note"] = "; ".join(w for w in why if w)[:300]
        if sa == so == "unsupported":
            out["verdict"] = "n/a"
        elif sa == "unsupported" or so == "unsupported":
            key = whole_scenario(sid, lang, o)
            out["verdict"] = f"explained ({key})" if key else "DIFFERENT"
        else:
            key = whole_scenario(sid, lang, o) if so == "ok" else None
            out["verdict"] = f"explained ({key})" if key else "FAILED"
        return out
    rules = SCENARIOS[sid]["compare"]
    ao, oo = normalize(a["observed"]), normalize(o["observed"])
    verdicts = []
    checks: list[tuple[str, Any, Any, Any]] = []
    for field, rule in rules.items():
        va, vo = ao.get(field), oo.get(field)
        if field == "cases" and isinstance(va, dict) and isinstance(vo, dict):
            # One verdict per case: an explanation names the case it covers.
            for k in sorted(set(va) | set(vo)):
                checks.append((f"cases.{k}", rule, va.get(k), vo.get(k)))
        else:
            checks.append((field, rule, va, vo))
    for field, rule, va, vo in checks:
        if rule == "ignore":
            continue
        if rule == "exact":
            same = va == vo
        else:
            lo, hi = rule["range"]
            same = in_range(va, lo, hi) and in_range(vo, lo, hi)
        if same:
            continue
        key = explanation(sid, field, lang, vo)
        out["fields"].append(
            {"field": field, "apache": va, "ours": vo, "explained": key}
        )
        verdicts.append(key)
    if not verdicts:
        out["verdict"] = "same"
    elif all(verdicts):
        out["verdict"] = "explained (" + ", ".join(sorted(set(verdicts))) + ")"
    else:
        out["verdict"] = "DIFFERENT"
    return out


def compare(apache: dict, ours: dict, langs: list[str]) -> list[dict]:
    rows = []
    for sid in SCENARIOS:
        for lang in langs:
            ra = apache["languages"].get(lang, {})
            ro = ours["languages"].get(lang, {})
            if "error" in ra or "error" in ro:
                rows.append(
                    {
                        "scenario": sid,
                        "lang": lang,
                        "verdict": "FAILED",
                        "fields": [],
                        "note": str(ra.get("error") or ro.get("error"))[:200],
                    }
                )
                continue
            rows.append(
                compare_one(
                    sid,
                    lang,
                    (ra.get("results") or {}).get(sid),
                    (ro.get("results") or {}).get(sid),
                )
            )
    return rows


def _client(run: dict, lang: str) -> str:
    c = (run["languages"].get(lang) or {}).get("client") or {}
    return f"{c.get('library', '?')} {c.get('version', '?')}"


def markdown(rows: list[dict], langs: list[str], apache: dict, ours: dict) -> str:
    lines = [
        f"Apache: {apache.get('broker')} ({apache.get('finished')}); "
        f"ours: {ours.get('broker')} ({ours.get('finished')}).",
        "",
        "Clients: " + "; ".join(f"{lang} {_client(ours, lang)}" for lang in langs),
        "",
        "| scenario | " + " | ".join(langs) + " |",
        "| --- | " + " | ".join("---" for _ in langs) + " |",
    ]
    by = {(r["scenario"], r["lang"]): r for r in rows}
    for sid in SCENARIOS:
        cells = []
        for lang in langs:
            r = by[(sid, lang)]
            cells.append(r["verdict"])
        lines.append(f"| `{sid}` | " + " | ".join(cells) + " |")
    lines += ["", "Differences and scenarios that did not run on both sides:", ""]
    for r in rows:
        if r["verdict"] == "same":
            continue
        for f in r["fields"]:
            lines.append(
                f"- `{r['scenario']}` {r['lang']} `{f['field']}`: Apache "
                f"`{json.dumps(f['apache'])[:160]}`, "
                f"ours `{json.dumps(f['ours'])[:160]}`"
                + (f" ({f['explained']})" if f["explained"] else " **unexplained**")
            )
        if r.get("note"):
            lines.append(
                f"- `{r['scenario']}` {r['lang']}: {r['note']} [{r['verdict']}]"
            )
    used = {f["explained"] for r in rows for f in r["fields"] if f["explained"]} | {
        v.split("(")[1].rstrip(")")
        for r in rows
        for v in [r["verdict"]]
        if v.startswith("explained (") and not r["fields"]
    }
    if used:
        lines += [
            "",
            "Explanations used by this run (tests/conformance/differences.json):",
            "",
        ]
        seen: set[str] = set()
        for d in DIFFERENCES["differences"]:
            if (
                d["id"] in used
                and d["id"] not in seen
                and not d["why"].startswith("see ")
            ):
                seen.add(d["id"])
                lines.append(f"- **{d['id']}**: {d['why']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("apache")
    ap.add_argument("ours")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--langs", default="python,node,java,go")
    args = ap.parse_args(argv)
    langs = [x for x in args.langs.split(",") if x]
    apache = json.loads(Path(args.apache).read_text())
    ours = json.loads(Path(args.ours).read_text())
    rows = compare(apache, ours, langs)
    text = markdown(rows, langs, apache, ours)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text)
    bad = [r for r in rows if r["verdict"] in ("DIFFERENT", "FAILED")]
    print(f"{len(rows)} comparisons, {len(bad)} unexplained or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
