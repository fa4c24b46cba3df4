"""Link shaping: parsing, presets, the tc commands rendered, and netem refused where missing."""
from __future__ import annotations

import io

import pytest

from orchestrate.config.link import LinkSpec, netem_missing_message, parse_link, tc_commands
from orchestrate.engine.compose_file import render_compose
from orchestrate.errors import UsageError


@pytest.mark.parametrize("text, spec", [
    ("rate=10gbit", LinkSpec(10 * 10**9)),
    ("rate=100mbit,delay=5ms", LinkSpec(100 * 10**6, 5.0)),
    ("rate=1gbit,delay=500us,loss=0.1%", LinkSpec(10**9, 0.5, 0.1)),
    ("1gbe", LinkSpec(10**9)),
    ("10GbE", LinkSpec(10 * 10**9)),
    ("wan", LinkSpec(100 * 10**6, 20.0)),
    ("delay=2ms", LinkSpec(None, 2.0)),
])
def test_link_specs_and_presets_parse(text, spec):
    assert parse_link(text) == spec


@pytest.mark.parametrize("text, message", [
    ("fast", "invalid --link 'fast': usage: --link rate=10gbit"),
    ("rate=10", "expected e.g. 100mbit, 1gbit, 10gbit"),
    ("rate=1gbit,delay=5", "expected e.g. 500us, 5ms"),
    ("loss=150%", "a percentage below 100"),
    ("rate=1gbit,rate=2gbit", "usage: --link"),
    ("jitter=3ms", "usage: --link"),
])
def test_bad_link_specs_are_refused_with_the_usage(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        parse_link(text)


def test_a_rate_alone_is_one_tbf():
    assert tc_commands(LinkSpec(10**9), "eth0") == [
        ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1gbit", "burst", "500000", "latency", "100ms"]]


def test_small_rates_keep_a_bucket_the_kernel_can_refill():
    [command] = tc_commands(LinkSpec(10 * 10**6), "eth0")
    assert command[command.index("burst") + 1] == str(32 * 1024)


def test_delay_and_loss_are_netem_with_the_rate_as_a_tbf_under_it():
    assert tc_commands(LinkSpec(100 * 10**6, 5.0, 0.1), "eth0") == [
        ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay", "5ms", "loss", "0.1%"],
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:", "handle", "2:", "tbf", "rate", "100mbit",
         "burst", "50000", "latency", "100ms"],
    ]


def test_only_shaped_runs_get_net_admin_and_start_as_root(make_job):
    shaped = render_compose(make_job(link=LinkSpec(10**9), run_as="1000:1000"))["services"]["node0"]
    assert shaped["cap_add"] == ["NET_ADMIN"] and shaped["user"] == "0:0"
    command = shaped["command"]
    assert command[command.index("--tc") + 1].startswith("tc qdisc add dev eth0 root tbf rate 1gbit")
    assert command[command.index("--run-as") + 1] == "1000:1000"  # torchrun itself runs as the user
    plain = render_compose(make_job(run_as="1000:1000"))["services"]["node0"]
    assert "cap_add" not in plain and plain["user"] == "1000:1000" and "--tc" not in plain["command"]


def test_delay_where_the_kernel_lacks_netem_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from orchestrate.cli.main import main
    from orchestrate.config.run_config import DEFAULT_IMAGE
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE)
    monkeypatch.setattr("orchestrate.launch.preflight.probe_netem",
                        lambda c, image: "Error: Specified qdisc kind is unknown.\n")
    code = main(["run", "--cpu", "--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"),
                 "--link", "rate=1gbit,delay=5ms"], out=io.StringIO(), client=client)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--link delay=5ms needs the kernel's netem qdisc, which this kernel lacks" in err[0]
    assert "tc: Error: Specified qdisc kind is unknown." in err[0]
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_the_refusal_names_only_the_delay_which_nothing_but_netem_gives():
    message = netem_missing_message(LinkSpec(10**9, 5.0, 1.0), "Error: Specified qdisc kind is unknown.")
    assert message.startswith("--link delay=5ms needs the kernel's netem qdisc, which this kernel lacks (tc: Error:"
                              " Specified qdisc kind is unknown.)")
    assert "userspace queue" in message and "--link rate=1gbit,loss=1%" in message
