"""`llamalab export` / `llamalab import`: one run travels between databases whole, and compares with local runs."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

import runfixtures
from llamalab.cli import cli
from llamalab.core.errors import ConfigError, StoreError
from llamalab.llamacpp import crosscheck
from llamalab.store import exchange, migrations
from llamalab.store.db import LOCAL_RUN_COLUMNS, Store


@pytest.fixture
def source(tmp_path):
    """A database holding the real demo run, as the machine that made it would."""
    with Store(tmp_path / "rig1.db") as s:
        rid = runfixtures.fill(s)
        trials = [t for t in s.trials(rid) if (t["build"], t["setting"]) == ("copies1", "kv-f16-f16")]
        s.save_crosscheck(rid, "copies1", "kv-f16-f16", crosscheck.compare([], trials), None)
        yield s


def counts(store: Store) -> dict[str, int]:
    return {t: store.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in Store.RUN_TABLES}


def test_export_document(source):
    doc = exchange.export_run(source)
    assert (doc["format"], doc["version"]) == ("llamalab-run", 1)
    assert doc["schema"] == migrations.names()
    assert doc["run_id"] == doc["tables"]["runs"][0]["id"] == source.run()["id"]
    t = doc["tables"]
    assert {k: len(v) for k, v in t.items()} == {"runs": 1, "system_info": 1, "builds": 3, "configs": 4,
                                                  "ledgers": 4, "buffers": 16, "trials": 12, "crosschecks": 1,
                                                  "context_checks": 0, "tunes": 0, "budget_fits": 0,
                                                  "tune_picks": 0, "outputs": 0, "output_logits": 0}
    # JSON columns are decoded, so the file reads as JSON
    assert isinstance(t["trials"][0]["requests_json"], list)
    assert t["ledgers"][0]["ledger_json"]["sched_copies"] == 4
    assert json.loads(exchange.dumps(doc)) == doc


def test_export_import_keeps_every_stored_byte(source, tmp_path):
    rid = source.run()["id"]
    text = exchange.dumps(exchange.export_run(source, rid))
    with Store(tmp_path / "fresh.db") as dest:
        res = exchange.import_run(dest, exchange.loads(text))
        assert (res.run_id, res.imported, res.trials, res.configs) == (rid, True, 12, 4)
        # same text in every column, same ids in a fresh db; only the database-local columns of the runs row (when
        # each database imported it: the fixture restores the source run too) may differ
        def local(tables):
            return {**tables, "runs": [{k: v for k, v in r.items() if k not in LOCAL_RUN_COLUMNS}
                                       for r in tables["runs"]]}

        assert local(dest.dump_run(rid)) == local(source.dump_run(rid))


def test_import_next_to_local_runs_renumbers_configs(source, tmp_path):
    rid = source.run()["id"]
    doc = exchange.export_run(source, rid)
    with Store(tmp_path / "busy.db") as dest:
        local = runfixtures.doc()
        local["tables"]["runs"][0]["id"] = "20261130-000000-10ca11"
        runfixtures.fill(dest, document=local)
        exchange.import_run(dest, doc)
        assert [r["id"] for r in dest.runs()] == ["20261130-000000-10ca11", rid]
        assert {c["id"] for c in dest.configs(rid)} == {5, 6, 7, 8}
        assert exchange.canonical(exchange.decode_tables(dest.dump_run(rid))) == \
            exchange.canonical(exchange.decode_tables(source.dump_run(rid)))
        for t in dest.trials(rid):  # each trial still points at its own configuration
            cfg = next(c for c in dest.configs(rid) if c["id"] == t["config_id"])
            assert (cfg["build"], cfg["setting"]) == (t["build"], t["setting"])


def test_importing_twice_is_a_no_op(source, tmp_path):
    doc = exchange.export_run(source)
    with Store(tmp_path / "d.db") as dest:
        exchange.import_run(dest, doc)
        before = counts(dest)
        again = exchange.import_run(dest, json.loads(exchange.dumps(doc)))
        assert not again.imported
        assert "already in this database, identical; nothing to do" in again.message
        assert counts(dest) == before


def test_conflicting_duplicate_is_refused(source, tmp_path):
    doc = exchange.export_run(source)
    with Store(tmp_path / "d.db") as dest:
        exchange.import_run(dest, doc)
        before = dest.dump_run(doc["run_id"])
        doc["tables"]["trials"][3]["output_tps"] = 1.0
        with pytest.raises(StoreError) as e:
            exchange.import_run(dest, doc)
        assert "already holds a different run with the id" in e.value.message
        assert "trials row 4 differs in output_tps" in e.value.message
        assert e.value.tip
        assert dest.dump_run(doc["run_id"]) == before


def test_a_run_that_went_on_is_a_conflict_too(source, tmp_path):
    doc = exchange.export_run(source)
    with Store(tmp_path / "d.db") as dest:
        exchange.import_run(dest, doc)
        doc["tables"]["trials"].pop()
        with pytest.raises(StoreError, match=r"12 trials row\(s\) here, 11 in the file"):
            exchange.import_run(dest, doc)


@pytest.mark.parametrize("text,message", [
    pytest.param("not json", "is not JSON", id="not-json"),
    pytest.param('{"format": "llamalab-report", "version": 1}', "is not a llamalab run export", id="a-report"),
    pytest.param('{"format": "llamalab-run", "version": 99, "tables": {}}', "version 99 export", id="newer-version"),
    pytest.param('{"format": "llamalab-run", "version": 1, "schema": ["0001_initial", "0999_future"], "tables": {}}',
                 "newer llamalab (schema 0999_future)", id="newer-schema"),
    pytest.param('{"format": "llamalab-run", "version": 1, "tables": {"runs": []}}', "holds no run", id="no-run"),
    pytest.param('{"format": "llamalab-run", "version": 1, "tables": {"runs": [{"id": "x"}], "gpus": []}}',
                 "tables.gpus", id="unknown-table"),
])
def test_bad_documents(text, message):
    with pytest.raises(ConfigError) as e:
        exchange.loads(text, name="x.json")
    assert message in e.value.message


def test_unknown_column_asks_for_an_upgrade(source, tmp_path):
    doc = exchange.export_run(source)
    doc["tables"]["trials"][0]["joules"] = 1.5
    with Store(tmp_path / "d.db") as dest:
        with pytest.raises(StoreError) as e:
            exchange.import_run(dest, exchange.loads(json.dumps(doc)))
        assert "no column(s) joules" in e.value.message and "upgrade llamalab" in e.value.tip
        assert dest.runs() == []


def test_import_is_one_transaction(source, tmp_path):
    doc = exchange.export_run(source)
    doc["tables"]["trials"].append(dict(doc["tables"]["trials"][0]))  # violates UNIQUE(run, build, setting, …)
    with pytest.raises(ConfigError,
                       match=r"trials: \('copies4', 'kv-f16-q8_0', 1, 1, 256, 32\) .* is stored more than once"):
        exchange.loads(json.dumps(doc))
    good = exchange.check(exchange.events_of(exchange.export_run(source)))
    # past the check (as if the file changed after it), the store refuses it whole
    with Store(tmp_path / "d.db") as dest:
        with pytest.raises(StoreError, match="UNIQUE constraint failed: trials"):
            exchange.import_file(dest, lambda: exchange.events_of(doc), good)
        assert counts(dest) == dict.fromkeys(Store.RUN_TABLES, 0)


# ---------------------------------------------------------------- the CLI, across machines

def test_cli_export_import_compare_across_hosts(source, tmp_path):
    """A run exported on one machine, imported on another that has its own run of the study: compare works."""
    runner = CliRunner()
    rid = source.run()["id"]
    exported = tmp_path / "rig1.json"
    res = runner.invoke(cli, ["export", rid, "--db", str(source.path), "-o", str(exported)])
    assert res.exit_code == 0, res.output
    # the file as it arrives from the other rig
    doc = json.loads(exported.read_text())
    assert doc["tables"]["runs"][0]["host"] == "vm"
    doc["tables"]["runs"][0]["host"] = "rig1"
    exported.write_text(json.dumps(doc))

    local_db = tmp_path / "rig2.db"
    with Store(local_db) as s:
        local = runfixtures.doc(runfixtures.CONCURRENCY)
        local["tables"]["runs"][0]["host"] = "rig2"
        local_id = runfixtures.fill(s, document=local)

    res = runner.invoke(cli, ["import", str(exported), "--db", str(local_db)])
    assert res.exit_code == 0, res.output
    assert f"imported run {rid} from rig1: 4 configuration(s), 12 trial(s)." in res.output
    res = runner.invoke(cli, ["import", str(exported), "--db", str(local_db)])
    assert res.exit_code == 0 and "nothing to do" in res.output

    res = runner.invoke(cli, ["runs", "--db", str(local_db), "--json"])
    assert {(r["id"], r["host"]) for r in json.loads(res.output)} == {(rid, "rig1"), (local_id, "rig2")}

    res = runner.invoke(cli, ["compare", rid, local_id, "--db", str(local_db), "--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output)
    assert (cmp["a"]["host"], cmp["b"]["host"]) == ("rig1", "rig2")
    assert [(c["build"], c["setting"]) for c in cmp["configs"]] == [
        ("copies4", "kv-f16-q8_0"), ("copies4", "kv-f16-f16"), ("copies1", "kv-f16-q8_0"), ("copies1", "kv-f16-f16")]
    for c in cmp["configs"]:
        assert [d["device"] for d in c["memory"]["compute"]] == ["RPC0", "RPC1"]
        assert {s["concurrency"] for s in c["speed"]} == {1}  # the only level both runs measured
        assert all(s["ci_low"] <= s["ratio"] <= s["ci_high"] for s in c["speed"])
    res = runner.invoke(cli, ["compare", rid, local_id, "--db", str(local_db)])
    assert res.exit_code == 0 and "## Memory" in res.output and "B/A" in res.output


def test_cli_import_refuses_a_conflict_with_exit_code(source, tmp_path):
    exported = tmp_path / "rig1.json"
    exported.write_text(exchange.dumps(exchange.export_run(source)))
    dest = tmp_path / "d.db"
    assert CliRunner().invoke(cli, ["import", str(exported), "--db", str(dest)]).exit_code == 0
    doc = json.loads(exported.read_text())
    doc["tables"]["runs"][0]["status"] = "interrupted"
    exported.write_text(json.dumps(doc))
    res = CliRunner().invoke(cli, ["import", str(exported), "--db", str(dest)])
    assert res.exit_code != 0
    assert isinstance(res.exception, StoreError) and "runs row 1 differs in status" in res.exception.message


def test_importing_an_unfinished_run_says_so(source, tmp_path):
    doc = exchange.export_run(source)
    doc["tables"]["runs"][0]["status"] = "interrupted"
    with Store(tmp_path / "d.db") as dest:
        res = exchange.import_run(dest, doc)
        assert res.imported and "Its status is interrupted: it did not finish on its machine" in res.message
        assert dest.runs()[0]["status"] == "interrupted"


@pytest.mark.parametrize("name", runfixtures.names())
def test_committed_exports_import_into_the_current_schema(name, tmp_path):
    """The fixtures were exported by an older schema; they still import, and report."""
    path = runfixtures.RUNS / f"{name}.json"
    db = tmp_path / "d.db"
    res = CliRunner().invoke(cli, ["import", str(path), "--db", str(db)])
    assert res.exit_code == 0 and "imported run" in res.output, res.output
    res = CliRunner().invoke(cli, ["report", "--db", str(db)])
    first = runfixtures.doc(name)["tables"]["trials"][0]
    first_row = ("## Tune: the front, measured" if name == runfixtures.TUNE
                 else f"| {first['build']} | {first['setting']} | 1 |")
    assert res.exit_code == 0 and first_row in res.output


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 4096, 10**7])
def test_a_document_read_in_pieces_of_any_size_gives_the_same_rows(source, piece):
    """`scan` reads an export from pieces of text (the CLI reads a MiB at a time): a number, string or row cut by a
    piece's end reads as a whole, for both layouts (the export's, and json.dumps' own indented one)."""
    doc = exchange.export_run(source)
    doc["tables"]["trials"][0]["output_tps"] = 1.5e3  # `1.` at a piece's end must not end the number
    for text in (exchange.dumps(doc), json.dumps(doc, indent=1), json.dumps(doc)):
        pieces = [text[i:i + piece] for i in range(0, len(text), piece)]
        assert list(exchange.scan(pieces)) == list(exchange.events_of(json.loads(text)))


@pytest.mark.parametrize("text, words", [
    ('{"format": "llamalab-run", "tables": {"runs": [{"id": 1}, ]}}', "is not JSON (Expecting value"),
    ('{"format": "llamalab-run"} trailing', "extra data after the document"),
    ('{"format": "llamalab-run", "tables": {"runs": [{"a": tru}]}}', "is not JSON"),
    ("", "is not JSON (the text ends before '{'"),
])
def test_text_that_is_not_json_is_refused_at_once(text, words):
    with pytest.raises(ConfigError) as e:
        exchange.check(exchange.scan([text[i:i + 4] for i in range(0, len(text), 4)]), "x.json")
    assert words in e.value.message
