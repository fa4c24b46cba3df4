"""Link shaping: parsing, presets, the tc commands rendered, and netem refused where missing."""
from __future__ import annotations

import io

import pytest

from orchestrate.config.link import (USAGE, LinkSpec, link_commands, netem_missing_message, parse_link, tc_commands,
                                    tbf_burst_bytes)
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


@pytest.mark.parametrize("text, bits", [
    ("rate=1.5gbit", 1_500_000_000), ("rate=10Gbit", 10 * 10**9), ("rate=800kbit", 800_000), ("rate=512bit", 512),
    (" 10gbe ", 10 * 10**9), ("rate=1gbit,", 10**9), ("ib-hdr", 200 * 10**9),
])
def test_rates_read_with_their_units_fractions_and_case(text, bits):
    assert parse_link(text).rate_bits == bits


def test_a_value_that_shapes_nothing_beside_one_that_shapes_is_taken_as_written():
    assert parse_link("rate=1gbit,delay=0ms,loss=0%") == LinkSpec(10**9)
    assert parse_link("delay=0us,loss=0.5%") == LinkSpec(None, 0.0, 0.5)
    assert parse_link("rate=1bit") == LinkSpec(1)


def test_delays_and_losses_read_in_their_units_and_bounds():
    assert parse_link("delay=1s") == LinkSpec(None, 1000.0)
    assert parse_link("delay=250us").delay_ms == 0.25
    assert parse_link("loss=99.5%") == LinkSpec(None, 0.0, 99.5)


SHAPES_NOTHING = ("it shapes nothing (a delay of 0 delays nothing, a loss of 0% drops nothing); leave --link out for"
                  " the bridge's own link, or give a rate, or a delay or loss above 0")


@pytest.mark.parametrize("text, message", [
    ("fast", f"invalid --link 'fast': {USAGE}"),
    ("", f"invalid --link '': {USAGE}"),
    ("rate", f"invalid --link 'rate': {USAGE}"),
    ("rate=1gbit,rate=2gbit", f"invalid --link 'rate=1gbit,rate=2gbit': {USAGE}"),
    ("jitter=3ms", f"invalid --link 'jitter=3ms': {USAGE}"),
    ("rate=10", "invalid --link rate '10': expected e.g. 100mbit, 1gbit, 10gbit"),
    ("rate=0gbit", "invalid --link rate '0gbit': expected e.g. 100mbit, 1gbit, 10gbit"),
    ("rate=1gbit,delay=5", "invalid --link delay '5': expected e.g. 500us, 5ms"),
    ("loss=150%", "invalid --link loss '150%': expected a percentage below 100, e.g. 0.1%"),
    ("loss=100%", "invalid --link loss '100%': expected a percentage below 100, e.g. 0.1%"),
    ("loss=1", "invalid --link loss '1': expected a percentage below 100, e.g. 0.1%"),
    ("rate=1gbit=2", "invalid --link rate '1gbit=2': expected e.g. 100mbit, 1gbit, 10gbit"),  # split at its first =
    # a link that shapes nothing planned "link " and gave the nodes NET_ADMIN and no tc rule
    ("delay=0ms", f"invalid --link 'delay=0ms': {SHAPES_NOTHING}"),
    ("loss=0%", f"invalid --link 'loss=0%': {SHAPES_NOTHING}"),
    ("delay=0.0s,loss=0.0%", f"invalid --link 'delay=0.0s,loss=0.0%': {SHAPES_NOTHING}"),
    ("rate=0.5bit", "invalid --link rate '0.5bit': expected e.g. 100mbit, 1gbit, 10gbit"),  # 0 bits: unshaped
    # tc reads bps as bytes a second: taken as bits, a tc user's link was 8x slower than meant
    ("rate=1gbps", "invalid --link rate=1gbps: tc reads bps as bytes per second; write rate=8gbit, or rate=1gbit for"
                   " bits"),
    ("rate=1.5Mbps,delay=5ms", "invalid --link rate=1.5Mbps: tc reads bps as bytes per second; write rate=12mbit, or"
                               " rate=1.5mbit for bits"),
    ("rate=100bps", "invalid --link rate=100bps: tc reads bps as bytes per second; write rate=800bit, or rate=100bit"
                    " for bits"),
])
def test_each_bad_link_spec_is_refused_whole(text, message):
    with pytest.raises(UsageError) as refused:
        parse_link(text)
    assert str(refused.value) == message


def test_a_link_reads_back_as_it_is_written():
    assert USAGE == ("usage: --link rate=10gbit[,delay=5ms][,loss=0.1%] or a preset (1gbe, 10gbe, 25gbe, 100gbe,"
                     " ib-hdr, wan)")
    assert str(LinkSpec(1_500_000_000, 0.5, 0.1)) == "rate=1500mbit,delay=0.5ms,loss=0.1%"
    assert str(LinkSpec(2_000)) == "rate=2kbit" and str(LinkSpec(10**9)) == "rate=1gbit"
    assert str(LinkSpec(1_234)) == "rate=1234bit" and str(LinkSpec(999)) == "rate=999bit"
    assert str(LinkSpec(None, 2.0)) == "delay=2ms" and str(LinkSpec(None, 0.0, 1.0)) == "loss=1%"
    assert not LinkSpec(10**9).needs_netem
    assert LinkSpec(None, 2.0).needs_netem and LinkSpec(None, 0.0, 1.0).needs_netem


def test_without_netem_a_delay_is_left_out_and_only_a_loss_becomes_a_rule():
    delayed = LinkSpec(10**9, 5.0)
    assert tc_commands(delayed, "eth0", netem=False) == tc_commands(LinkSpec(10**9), "eth0")
    assert link_commands(delayed, "eth0", netem=False) == tc_commands(LinkSpec(10**9), "eth0")
    assert link_commands(LinkSpec(None, 0.0, 0.5), "eth1", netem=False) == [
        ["iptables", "-w", "-A", "INPUT", "-i", "eth1", "-m", "statistic", "--mode", "random", "--probability",
         "0.005", "-j", "DROP"]]
    assert link_commands(LinkSpec(10**9, 0.0, 0.5), "eth1", netem=False) == [
        ["tc", "qdisc", "add", "dev", "eth1", "root", "tbf", "rate", "1gbit", "burst", "500000", "latency", "100ms"],
        ["iptables", "-w", "-A", "INPUT", "-i", "eth1", "-m", "statistic", "--mode", "random", "--probability",
         "0.005", "-j", "DROP"]]
    assert link_commands(LinkSpec(None, 0.0, 0.5), "eth1") == [
        ["tc", "qdisc", "add", "dev", "eth1", "root", "handle", "1:", "netem", "loss", "0.5%"]]


def test_a_buckets_size_is_4_ms_of_traffic_and_32_kb_at_least():
    floor = 32 * 1024 * 8 * 250  # the rate whose 4 ms are 32 KB
    assert tbf_burst_bytes(floor) == 32 * 1024
    assert tbf_burst_bytes(floor - 8000) == 32 * 1024
    assert tbf_burst_bytes(floor + 8000) == 32 * 1024 + 4


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
    # a tc that said nothing, or said it over several lines: its last line
    assert "(tc: netem unavailable):" in netem_missing_message(LinkSpec(None, 2.5), "  \n")
    assert netem_missing_message(LinkSpec(None, 2.5), "RTNETLINK answers: No such file or directory\nWe have an"
                                 " error talking to the kernel\n") == (
        "--link delay=2.5ms needs the kernel's netem qdisc, which this kernel lacks (tc: We have an error talking to"
        " the kernel): nothing else delays every packet without a userspace queue that would cap the link far below its"
        " rate; shape the rate and loss only (e.g. --link rate=1gbit,loss=1%), or load sch_netem on the host")


def test_a_dry_run_refuses_a_delay_without_netem_as_the_run_would_and_drops_a_loss_by_iptables(
        tmp_path, monkeypatch, capsys):
    from orchestrate.cli.main import main
    from orchestrate.config.run_config import DEFAULT_IMAGE
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE)
    probed = []
    monkeypatch.setattr("orchestrate.launch.preflight.probe_netem",
                        lambda c, image: probed.append(image) or "Error: Specified qdisc kind is unknown.\n")
    for command in (["plan"], ["run", "--dry-run"]):
        out = io.StringIO()
        code = main([*command, "--cpu", "--workdir", str(tmp_path), "--link", "wan"], out=out, client=client)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and out.getvalue() == "" and len(err) == 1, command
        # named as typed, and the preset's own rate offered without its delay
        assert err[0].startswith("error: --link wan, which is rate=100mbit,delay=20ms, needs the kernel's netem qdisc,"
                                 " which this kernel lacks"), err[0]
        assert err[0].endswith("shape the rate and loss only (--link rate=100mbit), or load sch_netem on the host")
    assert probed == [DEFAULT_IMAGE] * 2
    out = io.StringIO()
    assert main(["plan", "--cpu", "--workdir", str(tmp_path), "--link", "rate=1gbit,loss=1%"], out=out,
                client=client) == 0
    said = "[orchestrate] --link loss=1%: by iptables statistic (this kernel has no netem)"
    assert out.getvalue().splitlines()[0] == said
    out = io.StringIO()  # a link netem has no part in is not probed
    assert main(["plan", "--cpu", "--workdir", str(tmp_path), "--link", "1gbe"], out=out, client=client) == 0
    assert len(probed) == 3 and "[orchestrate]" not in out.getvalue()


def test_a_dry_run_that_cannot_probe_netem_plans_the_link_and_says_it_was_not_checked(tmp_path, monkeypatch):
    from orchestrate.cli.main import main
    from tests.fakes import FakeDockerClient

    monkeypatch.setattr("orchestrate.launch.preflight.probe_netem", lambda c, image: pytest.fail("probed"))
    out = io.StringIO()  # the engine answers, but has no node image to probe with (a dry run builds none)
    assert main(["plan", "--cpu", "--workdir", str(tmp_path), "--link", "wan"], out=out,
                client=FakeDockerClient()) == 0
    notes = [ln for ln in out.getvalue().splitlines() if ln.startswith("[orchestrate]")]
    assert notes == [("[orchestrate] --link rate=100mbit,delay=20ms: not checked against the engine's kernel (the image"
                      " ddp-compose-node:latest is not built yet); the run refuses its delay where the kernel has no"
                      " netem")]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    out = io.StringIO()
    assert main(["run", "--dry-run", "--cpu", "--workdir", str(tmp_path), "--link", "loss=1%"], out=out) == 0
    notes = [ln for ln in out.getvalue().splitlines() if ln.startswith("[orchestrate]")]
    assert notes == [("[orchestrate] --link loss=1%: not checked against the engine's kernel (no engine answers);"
                      " where the kernel has no netem, the run drops its loss by iptables")]
    assert "link loss=1%" in out.getvalue()


class ProbeContainer:
    """The probe's container, as the engine gives it: it exits with ``code`` and ``stderr``, or its
    start or its wait raises ``raises``; it records whether it was removed."""

    def __init__(self, code: int = 0, stderr: bytes = b"", raises: tuple[str, BaseException] = ("", None)) -> None:
        self.code, self.stderr, self.raises, self.removed = code, stderr, raises, False

    def start(self) -> None:
        if self.raises[0] == "start":
            raise self.raises[1]

    def wait(self, timeout: int) -> dict:
        if self.raises[0] == "wait":
            raise self.raises[1]
        return {"StatusCode": self.code}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return self.stderr

    def remove(self, force: bool = False) -> None:
        assert force
        self.removed = True


def test_the_netem_probe_says_tcs_error_and_removes_its_container_whatever_ends_it():
    """docker-py's run(remove=True) removed the container only once its wait returned: a Ctrl-C
    during the probe left it exited, and an image without tc left it created, unlabelled."""
    import docker.errors

    from orchestrate.engine.netem import PROBE_LABEL, probe_netem

    class Containers:
        def __init__(self, container: ProbeContainer) -> None:
            self.container, self.asked = container, {}

        def create(self, image: str, command: list, **options) -> ProbeContainer:
            self.asked = {"image": image, "command": command, **options}
            return self.container

    class Client:
        def __init__(self, container: ProbeContainer) -> None:
            self.containers = Containers(container)

    works = Client(ProbeContainer())
    assert probe_netem(works, "img") is None and works.containers.container.removed
    assert works.containers.asked["labels"] == {PROBE_LABEL: "netem"} and "netem" in works.containers.asked["command"]
    lacks = Client(ProbeContainer(2, b"Error: Specified qdisc kind is unknown.\n"))
    assert probe_netem(lacks, "img") == "Error: Specified qdisc kind is unknown.\n" and lacks.containers.container.removed
    for where, error in (("wait", KeyboardInterrupt()), ("start", docker.errors.APIError("no tc in the image"))):
        ended = Client(ProbeContainer(raises=(where, error)))
        with pytest.raises(type(error)):
            probe_netem(ended, "img")
        assert ended.containers.container.removed, where


def test_a_dry_run_whose_probe_the_engine_refuses_plans_the_link_and_says_why_it_was_not_checked(tmp_path,
                                                                                                 monkeypatch):
    import docker.errors

    from orchestrate.cli.main import main
    from orchestrate.config.run_config import DEFAULT_IMAGE
    from tests.fakes import FakeDockerClient

    def refused(client, image):
        raise docker.errors.APIError("exec: \"tc\": executable file not found in $PATH")

    monkeypatch.setattr("orchestrate.launch.preflight.probe_netem", refused)
    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE)
    out = io.StringIO()
    assert main(["plan", "--cpu", "--workdir", str(tmp_path), "--link", "wan"], out=out, client=client) == 0
    [note] = [ln for ln in out.getvalue().splitlines() if ln.startswith("[orchestrate]")]
    assert note.startswith("[orchestrate] --link rate=100mbit,delay=20ms: not checked against the engine's kernel (the"
                           " engine refused the probe: ") and "executable file not found" in note
    assert "link rate=100mbit,delay=20ms" in out.getvalue()
