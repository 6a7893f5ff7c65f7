"""store.jsoncol: the one convention for the store's `*_json` columns."""

from llamalab.store import jsoncol


def test_decode_reads_text_and_falls_back_to_the_default():
    assert jsoncol.decode('{"a": [1, 2]}') == {"a": [1, 2]}
    assert jsoncol.decode(None) is None
    assert jsoncol.decode("", []) == []
    assert jsoncol.decode("{not json", {}) == {}
    assert jsoncol.decode(None, []) == []
    assert jsoncol.decode(["already", "decoded"]) == ["already", "decoded"]


def test_encode_round_trips_with_sorted_keys():
    text = jsoncol.encode({"b": 1, "a": None})
    assert text == '{"a": null, "b": 1}'
    assert jsoncol.decode(text) == {"a": None, "b": 1}
    assert jsoncol.encode(None) is None


def test_columns_decode_under_the_short_name():
    row = {"id": 3, "ledger_json": '{"n_ctx": 4096}', "env_json": None, "status": "ok"}
    assert jsoncol.columns(row) == {"id": 3, "ledger": {"n_ctx": 4096}, "env": None, "status": "ok"}
