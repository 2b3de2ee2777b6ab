"""The user documents against the code: docs/SPEC.md's tables against the keys the spec parsers accept, their allowed
values and defaults; README's command table against the argument parsers; docs/ARCHITECTURE.md's layout against the
package. A key, flag or module added without its line in the document fails here."""
from __future__ import annotations

import argparse
import dataclasses
import os
import re

import pytest
import yaml

from planner.cli.main import COMMANDS, build_parser
from planner.spec import fields as fields_mod
from planner.spec import plan as plan_mod
from planner.spec.cluster import INTER_NODE_LATENCY_US, INTRA_NODE_LATENCY_US, PRECISIONS, parse_cluster
from planner.spec.model import ModelSpec
from planner.spec.plan import OverlapSpec, SearchSpec, SolverSpec, TrainingSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# SPEC.md section heading -> the prefix its keys have in an inline spec (a cluster's keys are dotted in its table)
SECTIONS = {"Top level (the plan spec)": "", "`training`": "training", "`training.overlap`": "training.overlap",
            "`search`": "search", "`solver`": "solver", "Model file": "model", "Cluster file": "cluster"}


def _spec_tables() -> dict[str, dict[str, list[str]]]:
    """{full key path: [type, default, allowed]} from docs/SPEC.md's tables."""
    rows, prefix = {}, None
    for line in open(os.path.join(ROOT, "docs", "SPEC.md"), encoding="utf-8"):
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            prefix = SECTIONS.get(title)
            continue
        m = re.match(r"\| `([\w.]+)` \|", line)
        if m and prefix is not None:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) == 4, line
            rows[f"{prefix}.{m.group(1)}" if prefix else m.group(1)] = cells[1:]
    return rows


def _accepted(monkeypatch) -> tuple[dict[str, set], dict[str, tuple]]:
    """({mapping path: keys the parser accepts there}, {key path: allowed values}): every branch of the parsers
    (inline model and cluster, overlap, pipeline_split, profiles, {path, gpus}) is read once with the instrumented
    Fields, whose done() records the keys a mapping accepts (what its unknown-key message lists)."""
    seen: dict[str, set] = {}
    choices: dict[str, tuple] = {}
    done, fstr, pick = fields_mod.Fields.done, fields_mod.Fields.str, plan_mod._choices

    def record_done(self):
        seen.setdefault(self.prefix, set()).update(self.seen)
        return done(self)

    def record_str(self, key, *args, **kw):
        if kw.get("choices") is not None:
            choices[self.path(key)] = tuple(kw["choices"])
        return fstr(self, key, *args, **kw)

    def record_choices(f, key, allowed, *args):
        choices[f.path(key)] = tuple(allowed)
        return pick(f, key, allowed, *args)

    monkeypatch.setattr(fields_mod.Fields, "done", record_done)
    monkeypatch.setattr(fields_mod.Fields, "str", record_str)
    monkeypatch.setattr(plan_mod, "_choices", record_choices)
    cluster_file = os.path.join(ROOT, "clusters", "dgx-h100-16x8.yaml")
    cluster = yaml.safe_load(open(cluster_file, encoding="utf-8"))
    cluster["profiles"] = {"compute": os.path.join(ROOT, "planner", "data", "h100_compute_profile.json"),
                           "memory": os.path.join(ROOT, "planner", "data", "memory_estimator.json")}
    model = yaml.safe_load(open(os.path.join(ROOT, "models", "llama3-8b.yaml"), encoding="utf-8"))
    spec = {"name": "x", "model": model, "cluster": cluster,
            "training": {"global_batch_size": 64, "seq_length": 4096, "overlap": {"grad_reduce": True}},
            "search": {"pipeline_split": {"first_stage_layers": 1}}}
    plan_mod.parse_spec(spec, os.path.join(ROOT, "specs", "x.yaml"))
    by_path = dict(seen)
    seen.clear()
    plan_mod.parse_spec(dict(spec, cluster={"path": cluster_file, "gpus": 64}), os.path.join(ROOT, "specs", "x.yaml"))
    by_path["cluster{path}"] = seen["cluster"]
    return by_path, choices


def _documented(key: str, rows: dict, accepted: dict) -> bool:
    """A key is documented by its own row, by its name in its parent's row (pipeline_split's keys, profiles'), or,
    for a mapping without a row (cluster.network), by rows for all of its keys."""
    if key in rows:
        return True
    parent, _, leaf = key.rpartition(".")
    if parent in rows and f"`{leaf}`" in " ".join(rows[parent]):
        return True
    return key in accepted and all(_documented(f"{key}.{k}", rows, accepted) for k in accepted[key])


def test_spec_md_tables_every_key_the_parsers_accept(monkeypatch):
    rows = _spec_tables()
    accepted, _ = _accepted(monkeypatch)
    missing = []
    for prefix, keys in accepted.items():
        if prefix == "cluster.gpu.peak_tflops":          # its keys are values: test_spec_md_lists_allowed_values
            continue
        if prefix == "cluster{path}":                    # the {path, gpus} form of `cluster`, in its row
            missing += [f"cluster.{k}" for k in keys if not re.search(rf"`\{{[^`]*\b{k}:", rows["cluster"][2])]
            continue
        missing += [key for k in keys if not _documented(key := f"{prefix}.{k}" if prefix else k, rows, accepted)]
    assert not missing, f"keys the parsers accept that docs/SPEC.md does not table: {sorted(missing)}"


def test_spec_md_tables_no_key_the_parsers_refuse(monkeypatch):
    accepted, _ = _accepted(monkeypatch)
    paths = {f"{p}.{k}" if p else k for p, keys in accepted.items() for k in keys}
    extra = sorted(k for k in _spec_tables() if k not in paths)
    assert not extra, f"docs/SPEC.md tables keys no parser accepts: {extra}"


def test_spec_md_lists_allowed_values(monkeypatch):
    rows = _spec_tables()
    _, choices = _accepted(monkeypatch)
    choices["cluster.gpu.peak_tflops"] = PRECISIONS
    assert {"training.precision", "search.schedules", "solver.robust", "model.family"} <= set(choices)
    missing = [f"{key}: {c}" for key, allowed in choices.items() for c in allowed
               if not (isinstance(c, bool) and "boolean" in rows[key][2])
               and not re.search(rf"(?<![\w-]){re.escape(str(c).lower())}(?![\w-])", rows[key][2])]
    assert not missing, f"allowed values docs/SPEC.md does not list: {missing}"


def _cluster_defaults() -> dict:
    """The defaults of cluster keys, read from a cluster that leaves them out (ClusterSpec's fields are not the
    file's keys)."""
    c = parse_cluster({"name": "c", "gpu": {"type": "H100", "memory_GiB": 80, "peak_tflops": {"bf16": 989}},
                       "nodes": 2, "gpus_per_node": 8,
                       "network": {"intra_node": {"bandwidth_GBps": 450}, "inter_node": {"bandwidth_Gbps": 400}}},
                      None)
    assert (c.intra.latency_us, c.inter.latency_us) == (INTRA_NODE_LATENCY_US, INTER_NODE_LATENCY_US)
    return {"cluster.network.intra_node.latency_us": c.intra.latency_us,
            "cluster.network.inter_node.latency_us": c.inter.latency_us,
            "cluster.network.bandwidth_snapshots": list(c.snapshots), "cluster.network.node_names": list(c.node_names),
            "cluster.profiles": c.profiles, "cluster.gpu.variability": "none" if c.gpu.variability is None else "?"}


def _dataclass_defaults() -> dict:
    out = {}
    for prefix, cls in (("training", TrainingSpec), ("training.overlap", OverlapSpec), ("search", SearchSpec),
                        ("solver", SolverSpec), ("model", ModelSpec)):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING and f.default is not None:     # None: resolved later, in words
                out[f"{prefix}.{f.name}"] = list(f.default) if isinstance(f.default, tuple) else f.default
    return out


def test_spec_md_defaults_are_the_code_defaults():
    """A default cell that starts with a literal (`bf16`, `60`, **`[1f1b]`**, `auto` = `[0, 1, 2]`) holds the
    dataclass's (or, for the cluster, the parser's) default."""
    rows = _spec_tables()
    want = {**_dataclass_defaults(), **_cluster_defaults()}
    checked, wrong = 0, []
    for key, (_, default, _) in rows.items():
        m = re.match(r"\**`([^`]+)`\**(?: = `([^`]+)`)?", default)
        if key not in want or not m:
            continue
        written = yaml.safe_load(m.group(2) or m.group(1))
        checked += 1
        if written != want[key]:
            wrong.append(f"{key}: SPEC.md {written!r}, code {want[key]!r}")
    assert not wrong, wrong
    assert checked >= 30          # the cells the pattern reads: a change of table format must not pass unread


def _subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _subparsers(sub, path + (name,))


def _command_parsers() -> dict[str, argparse.ArgumentParser]:
    """'solve', 'profile network', ...: every command's (and sub-command's) full parser."""
    out = {}
    for c in COMMANDS:
        top = build_parser(c.name)
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices[c.name]
        out.update({" ".join(path): p for path, p in _subparsers(sub, (c.name,))})
    return out


def test_every_cli_argument_has_a_help_string():
    bare = [f"planner {name} {a.option_strings[0] if a.option_strings else a.dest}"
            for name, p in _command_parsers().items() for a in p._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help]
    assert not bare, f"arguments without a help string in `--help`: {bare}"


def test_every_command_takes_json():
    """docs/ARCHITECTURE.md, "Exit codes, output": `--json` on every command."""
    parsers = _command_parsers()
    leaves = [n for n in parsers if not any(o != n and o.startswith(n + " ") for o in parsers)]
    assert [n for n in leaves if "--json" not in parsers[n]._option_string_actions] == []


def test_readme_command_table_flags_exist():
    """Every `--flag` of README's command table (and of its `planner import megatron` line) is one of that
    command's arguments; every command the table names exists."""
    parsers = _command_parsers()
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    table = text[text.index("| command | what it does |"):text.index("**Is my Megatron-LM run any good?**")]
    cells = [line.split(" | ")[0].replace("\\|", "|") for line in table.splitlines()[2:]]
    cells.append(re.search(r"`(planner import megatron [^`]*)`", text).group(1))
    wrong, named = [], set()
    for cell in cells:
        for usage in re.findall(r"planner [^`]*", cell):
            words = usage.split()
            name = words[1]
            alternatives = words[2].split("|") if len(words) > 2 else []
            if len(alternatives) > 1 and f"{name} {alternatives[0]}" in parsers:        # profile network|memory|...
                subs = [f"{name} {w}" for w in alternatives]
            elif len(words) > 2 and f"{name} {words[2]}" in parsers:
                subs = [f"{name} {words[2]}"]
            else:
                subs = [name]
            for sub in subs:
                named.add(sub)
                if sub not in parsers:
                    wrong.append(f"no command `planner {sub}`")
                    continue
                wrong += [f"planner {sub} has no {flag}" for flag in re.findall(r"(?<![\w-])-{1,2}[a-z][\w-]*", usage)
                          if flag not in parsers[sub]._option_string_actions]
    assert not wrong, wrong
    assert {"solve", "estimate", "export", "import megatron", "fit compute"} <= named


def _layout_entries() -> dict[str, str]:
    """docs/ARCHITECTURE.md's layout block: {entry ('config.py', 'spec/', ...): its text}."""
    text = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    block = text[text.index("## Layout (as built)"):text.index("Departures from the layout")]
    block = block[block.index("planner/\n") + len("planner/\n"):block.rindex("```")]
    entries, name = {}, None
    for line in block.splitlines():
        m = re.match(r"  (\S+)", line)
        if m and not line.startswith("   "):
            name = m.group(1)
            entries[name] = line[len(name) + 2:]
        elif name:
            entries[name] += " " + line.strip()
    return entries


def test_architecture_layout_names_every_module():
    entries = _layout_entries()
    pkg = os.path.join(ROOT, "planner")
    missing = []
    for dirpath, _, files in os.walk(pkg):
        rel = os.path.relpath(dirpath, pkg)
        if "__pycache__" in rel or rel.startswith("data"):
            continue
        for f in sorted(files):
            if not f.endswith(".py") or (f == "__init__.py" and rel != "."):
                continue
            if rel == ".":
                ok = f in entries
            else:
                ok = re.search(rf"(?<![\w/]){re.escape(f)}", entries.get(rel + "/", "")) is not None
            if not ok:
                missing.append(f if rel == "." else f"{rel}/{f}")
    assert not missing, f"modules docs/ARCHITECTURE.md's layout does not name: {missing}"
    named = [f"{e}{f}" for e, t in entries.items() if e.endswith("/") for f in re.findall(r"(?<![\w/])(\w+\.py)", t)]
    named += [e for e in entries if e.endswith(".py")]
    assert [n for n in named if not os.path.exists(os.path.join(pkg, n))] == []


@pytest.mark.parametrize("entry", ["data/"])
def test_architecture_layout_names_the_shipped_data(entry):
    assert entry in _layout_entries()
