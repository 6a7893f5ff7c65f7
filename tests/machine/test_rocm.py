"""rocm-smi parsing, on output people posted (tests/fixtures/SOURCES-drivers.md)."""

from __future__ import annotations

import pytest

from llamalab.machine import rocm
from testpaths import FIXTURES

F = FIXTURES / "rocm-smi"


def test_meminfo_json_one_card():
    (card,) = rocm.parse_meminfo((F / "rx7900xt-meminfo.json").read_text())
    assert card.card == 0 and card.name == "Radeon RX 7900 XT"
    assert card.total_mib == round(21458059264 / 2**20, 1) and card.used_mib == round(27856896 / 2**20, 1)


def test_meminfo_csv_two_cards():
    cards = rocm.parse_meminfo((F / "rx6800-raphael-meminfo.csv").read_text())
    assert [c.card for c in cards] == [0, 1]
    assert cards[0].name.startswith("Navi 21") and cards[0].used_mib == round(692142080 / 2**20, 1)
    assert cards[1].total_mib == 64.0  # the Raphael iGPU's 64 MiB carve-out


def test_meminfo_plain_text():
    (card,) = rocm.parse_meminfo((F / "meminfo-plain.txt").read_text())
    assert (card.card, card.total_mib, card.used_mib) == (0, round(4278190080 / 2**20, 1), round(108814336 / 2**20, 1))


@pytest.mark.parametrize("text", ["", "not json {", '{"system": {"Driver version": "6.8"}}'])
def test_meminfo_nothing_useful(text):
    assert rocm.parse_meminfo(text) == []


def test_showpids_spaces():
    pids = rocm.parse_showpids((F / "showpids-pt-main-thread.txt").read_text())
    assert pids[1168514] == round(177386942464 / 2**20, 1)
    assert pids[3722222] == 0.0 and len(pids) == 3


def test_showpids_tabs_and_details_rows_sum_per_pid():
    assert rocm.parse_showpids((F / "showpids-llama-server-tabs.txt").read_text()) == {74853: 0.0}
    pids = rocm.parse_showpids((F / "showpids-details-llama-server.txt").read_text())
    assert pids == {132174: round((15053770752 + 16869904384) / 2**20, 1)}


def test_showpids_unknown_usage_is_left_out():
    assert rocm.parse_showpids((F / "showpids-spaces-unknown.txt").read_text()) == {}


def test_probe_without_rocm_smi():
    assert rocm.probe_meminfo(which=lambda n: None) is None
    assert rocm.probe_pids(which=lambda n: None) is None


def test_probe_runs_the_json_command():
    seen = []

    def capture(argv):
        seen.append(argv)
        return 0, (F / "rx7900xt-meminfo.json").read_text()

    cards = rocm.probe_meminfo(which=lambda n: f"/opt/rocm/bin/{n}", capture=capture)
    assert seen == [["/opt/rocm/bin/rocm-smi", "--showmeminfo", "vram", "--showproductname", "--json"]]
    assert cards and cards[0].card == 0
