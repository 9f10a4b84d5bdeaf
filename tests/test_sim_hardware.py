"""The hardware catalogue (sim/hardware/hardware.py, sim/hardware/lookup.py, one file per chip
under sim/hardware/chips/): provenance of every number, each chip's kernel constants and
network in its one entry, JSON entries, errors."""

import json

import pytest

from sim.hardware.catalogue import CATALOGUE
from sim.hardware.chip_kernels import KERNEL_FIELDS, ChipKernels
from sim.hardware.cluster_network import DEFAULT_NETWORK, NodeNetwork
from sim.hardware.hardware import NUMBER_FIELDS, Hardware
from sim.hardware.lookup import get_hardware, hardware_catalogue, load_hardware_file

ISSUE_KEYS = ("a100-80g", "h100", "h200", "b200", "910b", "mi300x", "mi325x", "mi355x")
# Ridge points (bf16 FLOP per byte) from reference/simulators.md §8.
REFERENCE_RIDGE = {"a100-80g": 153, "h100": 295, "h200": 206, "b200": 281}
# NOTE: the built-in chips the kernel cost model refuses (no kernel constants): adding one
# here is the deliberate way to ship a chip without them.
ROOFLINE_ONLY = ()


def _write(tmp_path, data, name="hw.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_catalogue_holds_the_issue_keys():
    """The catalogue has exactly a100-80g, h100, h200, b200, 910b, mi300x, mi325x and mi355x."""
    assert sorted(hardware_catalogue()) == sorted(ISSUE_KEYS)


@pytest.mark.parametrize("hw", CATALOGUE, ids=lambda h: h.key)
def test_every_catalogue_number_has_a_source(hw):
    """Every number (peaks, memory, interconnect, efficiencies) names a non-empty source."""
    for field in NUMBER_FIELDS:
        assert hw.source(field).strip(), field
        if getattr(hw, field) is None:
            assert any(w in hw.source(field) for w in ("none", "unknown")), field


@pytest.mark.parametrize("hw", CATALOGUE, ids=lambda h: h.key)
def test_every_chip_has_a_sourced_network_and_kernels_or_is_named_roofline_only(hw):
    """Each entry holds its node network with a source, and either kernel constants with a
    source for every number it gives or a place in ROOFLINE_ONLY."""
    assert isinstance(hw.network, NodeNetwork) and hw.network.source.strip()
    if hw.key in ROOFLINE_ONLY:
        assert hw.kernels is None
        return
    assert isinstance(hw.kernels, ChipKernels), f"{hw.key}: no kernels and not ROOFLINE_ONLY"
    for field in KERNEL_FIELDS:
        if getattr(hw.kernels, field) is not None:
            assert hw.kernels.source(field).strip(), field


def test_only_910b_is_flagged_low_confidence():
    """910b is flagged low confidence and says so in its name and sources; no other entry is."""
    flagged = [h.key for h in CATALOGUE if h.low_confidence]
    assert flagged == ["910b"]
    hw = get_hardware("910b")
    assert "LOW CONFIDENCE" in hw.name and "LOW CONFIDENCE" in hw.source("flops_bf16")


@pytest.mark.parametrize(("key", "ridge"), sorted(REFERENCE_RIDGE.items()))
def test_ridge_points_match_the_reference_table(key, ridge):
    """Peak bf16 FLOP/s over HBM bandwidth reproduces the reference's ridge point within 1%."""
    assert get_hardware(key).ridge_point() == pytest.approx(ridge, rel=0.01)


def test_h200_has_h100_compute_and_more_bandwidth_and_memory():
    """H200 is the same GH100 compute with 4.8 TB/s and 141 GB of HBM3e."""
    h100, h200 = get_hardware("h100"), get_hardware("h200")
    assert (h200.flops_bf16, h200.flops_fp8) == (h100.flops_bf16, h100.flops_fp8)
    assert (h200.mem_bw, h200.mem_capacity) == (4.8e12, 141e9)


def test_a100_has_no_fp8_peak():
    """A100 has no FP8 tensor cores: its fp8 peak is None and the source says why."""
    hw = get_hardware("a100-80g")
    assert hw.flops_fp8 is None and hw.peak_flops("fp8") is None
    assert hw.peak_flops("fp16") == hw.peak_flops("bf16") == 312e12


def test_unknown_key_lists_the_known_keys():
    """An unknown key raises ValueError whose message lists every known key."""
    with pytest.raises(ValueError, match="unknown hardware 'h300'") as err:
        get_hardware("h300")
    assert all(k in str(err.value) for k in ISSUE_KEYS)


def test_this_machine_is_not_typed_in_but_calibrated():
    """Asking for 'this-machine' explains that it comes from calibration."""
    with pytest.raises(ValueError, match="calibration"):
        get_hardware("this-machine")


def test_json_entry_overrides_a_known_entry(tmp_path):
    """A file entry with a known key changes only the fields it gives; new numbers get the
    file as source unless the entry gives one."""
    path = _write(tmp_path, {"h100": {"memory_efficiency": 0.9, "mem_bw": 3.0e12,
                                      "sources": {"mem_bw": "our STREAM run"}}})
    hw = hardware_catalogue(path)["h100"]
    assert (hw.memory_efficiency, hw.mem_bw, hw.flops_bf16) == (0.9, 3.0e12, 989.4e12)
    assert hw.source("mem_bw") == "our STREAM run"
    assert str(path) in hw.source("memory_efficiency")
    assert hw.source("flops_bf16") == get_hardware("h100").source("flops_bf16")


def test_json_entry_extends_the_catalogue_from_a_base(tmp_path):
    """A new key with `base` starts from that entry; the built-ins stay as they were."""
    path = _write(tmp_path, {"h100-pcie": {"base": "h100", "name": "H100 PCIe",
                                           "mem_bw": 2.0e12, "flops_bf16": 756e12}})
    entries = hardware_catalogue(path)
    assert entries["h100-pcie"].mem_bw == 2.0e12 and entries["h100-pcie"].key == "h100-pcie"
    assert entries["h100"] == get_hardware("h100")


def test_json_new_entry_without_base_needs_every_number_and_source(tmp_path):
    """A brand-new entry must give every number; with all numbers and sources it loads."""
    full = {f: 1e12 for f in NUMBER_FIELDS} | {f: 0.5 for f in NUMBER_FIELDS if "efficiency" in f}
    sources = {f: "vendor sheet" for f in NUMBER_FIELDS}
    ok = load_hardware_file(_write(tmp_path, {"x1": {**full, "sources": sources}}))
    assert ok["x1"].mem_bw == 1e12 and ok["x1"].name == "x1"
    with pytest.raises(ValueError, match="missing fields"):
        load_hardware_file(_write(tmp_path, {"x2": {"mem_bw": 1e12}}))
    with pytest.raises(ValueError, match="no source for"):
        load_hardware_file(_write(tmp_path, {"x3": full}))


def test_get_hardware_reads_a_json_path(tmp_path):
    """get_hardware takes `path.json` (one entry) or `path.json#key` (several)."""
    one = _write(tmp_path, {"mine": {"base": "a100-80g"}}, "one.json")
    two = _write(tmp_path, {"p": {"base": "h100"}, "q": {"base": "h200"}}, "two.json")
    assert get_hardware(one).key == "mine"
    assert get_hardware(f"{two}#q").mem_bw == 4.8e12
    with pytest.raises(ValueError, match="several entries"):
        get_hardware(two)
    with pytest.raises(ValueError, match="no entry 'r'"):
        get_hardware(f"{two}#r")


MALFORMED = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "non-empty JSON object"),
    ("{}", "non-empty JSON object"),
    ('{"h100": 5}', "must be a JSON object"),
    ('{"h100": {"mem_bandwidth": 1e12}}', "unknown fields"),
    ('{"h100": {"mem_bw": -1}}', "mem_bw must be a positive number"),
    ('{"h100": {"mem_bw": "fast"}}', "mem_bw must be a positive number"),
    ('{"h100": {"compute_efficiency": 1.5}}', "fraction of peak"),
    ('{"h100": {"flops_bf16": null}}', "flops_bf16 must be a positive number"),
    ('{"x": {"base": "h300"}}', "unknown base 'h300'"),
    ('{"h100": {"sources": ["a"]}}', "sources must be an object"),
    ('{"h100": {"sources": {"speed": "x"}}}', "unknown fields"),
    ('{"h100": {"low_confidence": "yes"}}', "low_confidence a boolean"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_hardware_json_raises_a_clear_error(tmp_path, text, message):
    """Malformed files raise ValueError naming the problem (and the file)."""
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as err:
        load_hardware_file(path)
    assert str(path) in str(err.value)


def test_missing_hardware_file_raises_value_error(tmp_path):
    """A path that does not exist raises ValueError saying so."""
    with pytest.raises(ValueError, match="does not exist"):
        get_hardware(tmp_path / "nope.json")


def test_hardware_without_a_source_is_rejected():
    """Constructing an entry with a number but no source for it fails."""
    base = get_hardware("h100")
    sources = dict(base.sources)
    del sources["mem_bw"]
    with pytest.raises(ValueError, match="no source for mem_bw"):
        Hardware(**{**base.__dict__, "sources": sources})


def test_peak_flops_rejects_unknown_dtype():
    """peak_flops names the dtypes it knows when given another."""
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        get_hardware("h100").peak_flops("int4")


@pytest.mark.parametrize("hw", CATALOGUE, ids=lambda h: h.key)
def test_to_dict_round_trips(hw):
    """Hardware(**hw.to_dict()) rebuilds an equal entry (sources as a plain dict)."""
    d = hw.to_dict()
    assert isinstance(d["sources"], dict) and Hardware(**d) == hw


NETWORK = {"gpus_per_node": 4, "nic_bw": 12.5e9, "source": "our rack"}
KERNELS = {"num_sms": 64, "mamf_bf16": 5e14, "mamf_fp8": None, "attention_fraction": 0.6,
           "sources": {"num_sms": "sheet", "mamf_bf16": "sweep", "attention_fraction": "FA"}}


def _full_entry(**sections):
    numbers = {f: 1e12 for f in NUMBER_FIELDS} | {f: 0.5 for f in NUMBER_FIELDS
                                                  if "efficiency" in f}
    return {**numbers, "sources": {f: "vendor sheet" for f in NUMBER_FIELDS}, **sections}


def test_json_new_entry_without_sections_is_roofline_only_on_the_default_network(tmp_path):
    """No base, no "kernels", no "network": kernels None, DEFAULT_NETWORK."""
    hw = load_hardware_file(_write(tmp_path, {"x": _full_entry()}))["x"]
    assert hw.kernels is None and hw.network == DEFAULT_NETWORK


def test_json_new_entry_with_sections_holds_them(tmp_path):
    """No base, both sections given whole: the entry holds them as given."""
    hw = load_hardware_file(_write(tmp_path, {"x": _full_entry(kernels=KERNELS,
                                                               network=NETWORK)}))["x"]
    assert hw.network == NodeNetwork(4, 12.5e9, "our rack")
    assert (hw.kernels.num_sms, hw.kernels.mamf("fp8"), hw.kernels.source("mamf_bf16")) == \
        (64, None, "sweep")


def test_json_entry_with_a_base_inherits_and_overrides_its_sections(tmp_path):
    """A based entry inherits the base's kernels and network; a section it gives changes the
    fields it names (the file as source where no source is given); null kernels: roofline-only."""
    h100 = get_hardware("h100")
    path = _write(tmp_path, {"same": {"base": "h100"},
                             "wider": {"base": "h100", "network": {"nic_bw": 1e11},
                                       "kernels": {"num_sms": 114}},
                             "plain": {"base": "h100", "kernels": None}})
    entries = load_hardware_file(path)
    assert (entries["same"].kernels, entries["same"].network) == (h100.kernels, h100.network)
    wider = entries["wider"]
    assert (wider.network.nic_bw, wider.network.gpus_per_node) == (1e11, 8)
    assert str(path) in wider.network.source and str(path) in wider.kernels.source("num_sms")
    assert wider.kernels.mamf_bf16 == h100.kernels.mamf_bf16
    assert wider.kernels.source("mamf_bf16") == h100.kernels.source("mamf_bf16")
    assert entries["plain"].kernels is None


SECTION_ERRORS = [
    ({"network": {"nic_bw": -1}}, "network.nic_bw must be a positive number"),
    ({"network": 5}, "NodeNetwork must be given as an object"),
    ({"network": {"nics": 8}}, "unknown NodeNetwork fields"),
    ({"kernels": {"num_sms": 0}}, "kernels.num_sms must be an integer"),
    ({"kernels": {"attention_fraction": 1.5}}, "fraction of the bf16 peak"),
    ({"kernels": {"speed": 1}}, "unknown ChipKernels fields"),
    ({"kernels": {"sources": {"speed": "x"}}}, "kernels.sources name unknown fields"),
]


@pytest.mark.parametrize(("section", "message"), SECTION_ERRORS)
def test_malformed_sections_raise_a_clear_error(tmp_path, section, message):
    """A bad "kernels" or "network" section raises ValueError naming the problem and file."""
    path = _write(tmp_path, {"h100": section})
    with pytest.raises(ValueError, match=message) as err:
        load_hardware_file(path)
    assert str(path) in str(err.value)


def test_a_new_entry_needs_each_section_whole(tmp_path):
    """Without a base, a section missing a required field is refused, naming it."""
    with pytest.raises(ValueError, match=r"NodeNetwork is missing fields \['source'\]"):
        load_hardware_file(_write(tmp_path, {"x": _full_entry(network={"gpus_per_node": 8,
                                                                       "nic_bw": 1e10})}))
    no_source = {**KERNELS, "sources": {"num_sms": "sheet"}}
    with pytest.raises(ValueError, match=r"no source for kernels\.mamf_bf16"):
        load_hardware_file(_write(tmp_path, {"x": _full_entry(kernels=no_source)}))
