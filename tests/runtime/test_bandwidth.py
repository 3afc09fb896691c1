"""Host <-> device bandwidth: measured once, stored as JSON, read back after."""
from __future__ import annotations

import json

import pytest
import torch

from autosched.runtime import bandwidth as bw_mod


def test_measured_once_then_read_from_the_json_file(bw_path):
    measured = []

    def counting(device, clock):
        measured.append((device, clock))
        return bw_mod.measure(device, clock)
    first = bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path, measure=counting)
    assert measured == [(torch.device("cpu"), "wall")]
    assert first.d2h_bytes_per_s > 1e8 and first.h2d_bytes_per_s > 1e8
    assert first.overlap is False and "CPU memcpy" in first.source
    stored = json.loads(bw_path.read_text())
    assert stored["format"] == bw_mod.FORMAT
    assert stored["devices"][first.device] == first.to_json()

    def no_measuring(*a, **k):
        raise AssertionError("measured again")
    assert bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path, measure=no_measuring) \
        == first
    with pytest.raises(AssertionError, match="measured again"):
        bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path, refresh=True,
                                     measure=no_measuring)


def test_each_clock_has_its_own_entry(bw_path):
    wall = bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path, clock="wall")
    cpu = bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path, clock="cpu")
    assert wall.device != cpu.device
    assert set(json.loads(bw_path.read_text())["devices"]) == {wall.device, cpu.device}


@pytest.mark.parametrize("content", ["not json", '{"format": 0, "devices": {}}', "[1, 2]"])
def test_an_unreadable_file_is_measured_again_and_replaced(bw_path, content):
    bw_path.write_text(content)
    got = bw_mod.host_device_bandwidth(torch.device("cpu"), bw_path)
    assert json.loads(bw_path.read_text())["devices"][got.device]["overlap"] is False
