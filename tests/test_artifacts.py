"""What latopt writes to disk: devices and FIFOs are written to, not replaced; unwritable outputs are one
line naming the path and why, with nothing left behind; modes honour the umask; names are not paths."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import latopt.files.artifacts as artifacts
from latopt.cli import main
from latopt.errors import LatoptError
from latopt.files.artifacts import (
    OutputError,
    atomic_dir,
    atomic_path,
    check_name,
    write_json_atomic,
    write_text_atomic,
)
from latopt.files.checkpoint import make_arch, save_checkpoint
from latopt.files.readers import read_json, read_yaml
from latopt.latency.onnx_io import export_onnx
from latopt.nets.models import build_model
from latopt.runtime import cli as runtime_cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
INSPECT = ["inspect", "mobilenetv2_035", "--resolution", "32", "--num-classes", "10"]


def hidden(d: Path) -> list[str]:
    """Temporary files or directories of the atomic writers left in ``d`` (recursively)."""
    return [str(p) for p in d.rglob(".*")]


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def tiny_onnx(tmp_path: Path) -> Path:
    return export_onnx(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()), (1, 3, 8, 8),
                       tmp_path / "tiny.onnx")


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


# ------------------------------------------------------------------------------- devices and FIFOs
@pytest.fixture
def devices(tmp_path: Path) -> dict[str, Path]:
    """``null`` and ``full`` character devices. As root, nodes of our own in tmp_path (same device numbers),
    so that a regression replaces them and not the machine's /dev/null; else the real ones (which an
    ordinary user cannot replace anyway)."""
    numbers = {"null": (1, 3), "full": (1, 7)}
    if os.geteuid() == 0:
        d = tmp_path / "dev"
        d.mkdir()
        try:
            for name, (major, minor) in numbers.items():
                os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            return {name: d / name for name in numbers}
        except OSError:
            pass
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    return {name: Path("/dev") / name for name in numbers}


def is_device_without_leftovers(dev: Path) -> bool:
    return stat.S_ISCHR(os.stat(dev).st_mode) and not [n for n in os.listdir(dev.parent) if n.startswith(f".{dev.name}.")]


def test_inspect_json_to_devices(devices: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*INSPECT, "--json", str(devices["null"])]) == 0
    assert is_device_without_leftovers(devices["null"])     # as root, os.replace made it a regular file
    capsys.readouterr()
    assert main([*INSPECT, "--json", str(devices["full"])]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"latopt: error: cannot write {devices['full']}: No space left on device"), line
    assert is_device_without_leftovers(devices["full"])


def test_runtime_output_to_devices(tiny_onnx: Path, devices: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert runtime_cli.main([str(tiny_onnx), "--output", str(devices["full"])]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"latopt.runtime: error: cannot write {devices['full']}: No space left on device"), line
    assert is_device_without_leftovers(devices["full"])
    assert runtime_cli.main([str(tiny_onnx), "--output", str(devices["null"])]) == 0
    assert is_device_without_leftovers(devices["null"])
    out = tiny_onnx.parent / "y.npy"                       # a regular file still goes through atomic_path
    assert runtime_cli.main([str(tiny_onnx), "--output", str(out)]) == 0
    assert np.load(out).shape == (1, 4, 6, 6) and not hidden(tiny_onnx.parent)


def test_fifo_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)  # blocks until written
    reader.start()
    write_json_atomic(fifo, {"a": 1})
    reader.join(timeout=30)
    assert got and json.loads(got[0]) == {"a": 1}
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not hidden(tmp_path)


def test_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(LatoptError, match="is not a regular file"):
            write_json_atomic(path, {})
    assert stat.S_ISSOCK(os.stat(path).st_mode) and not hidden(tmp_path)


# ------------------------------------------------------------------------------ unwritable outputs
def _mount_ns(setup: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` after the shell commands ``setup`` in a private mount namespace (its mounts vanish with
    it); skip when this machine does not allow that (unprivileged user, no unshare)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"({setup}) >/dev/null 2>&1 || exit 99; exec \"$@\"", "sh",
                        *argv], cwd=cwd, env={**ENV, "PYTHONPATH": os.getcwd()}, capture_output=True, text=True,
                       timeout=300)
    if r.returncode == 99:
        pytest.skip("cannot mount in a private mount namespace here (needs root or CAP_SYS_ADMIN)")
    return r


@pytest.mark.slow   # latopt subprocesses
@pytest.mark.parametrize("target,named", [("ro/x.json", ""), ("ro/sub/x.json", " (ro/sub)")])
def test_read_only_directory_is_one_line(tmp_path: Path, target: str, named: str) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    argv = [sys.executable, "-m", "latopt", *INSPECT, "--json", target]
    if os.geteuid() != 0:  # permission bits stop an ordinary user: a real EACCES
        ro.chmod(0o500)
        try:
            r = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
        finally:
            ro.chmod(0o700)
        reason = "Permission denied"
    else:  # root ignores permission bits: a read-only bind mount gives a real EROFS
        r = _mount_ns(f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}", argv, tmp_path)
        reason = "Read-only file system"
    assert r.returncode == 2, r.stderr
    line = one_line_error(r.stderr)
    assert line == f"latopt: error: cannot write {target}: {reason}{named}; choose a writable location", line
    assert list(ro.iterdir()) == []


@pytest.mark.slow   # a latopt subprocess on a tiny file system
def test_full_disk_is_one_line(tmp_path: Path) -> None:
    """A real full file system (a small tmpfs, filled): JSON (an OSError) and a checkpoint (torch.save to a
    path reports ENOSPC as a RuntimeError) both end as one line naming the path; no temp file is left."""
    full = tmp_path / "full"
    full.mkdir()
    script = tmp_path / "write.py"
    script.write_text(f"""
import sys, torch
from latopt.cli import main
from latopt.errors import LatoptError
from latopt.nets.models import build_model
from latopt.files.checkpoint import make_arch, save_checkpoint
m = build_model("mobilenetv2_035", num_classes=10)
try:
    save_checkpoint("{full}/base.pt", m, make_arch(m, "mobilenetv2_035", 10))
except LatoptError as e:
    print("checkpoint:", e, file=sys.stderr)
sys.exit(main({[*INSPECT, "--json", str(full / "run" / "x.json")]!r}))
""")
    r = _mount_ns(f"mount -t tmpfs -o size=256k tmpfs {full} && (dd if=/dev/zero of={full}/fill bs=4k || true)",
                  [sys.executable, str(script)], tmp_path)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert err[0].startswith(f"checkpoint: cannot write {full}/base.pt: No space left on device"), r.stderr
    assert err[1].startswith(f"latopt: error: cannot write {full}/run/x.json: No space left on device"), r.stderr
    assert len(err) == 2


def test_unwritable_paths_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same conversions without a real file system error (runs everywhere, also without unshare): the
    errors are raised by monkeypatched calls, as the kernel would raise them."""
    def deny(*a, **k):  # creating the temp file in a directory the user may not write
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path))

    with monkeypatch.context() as m:
        m.setattr(artifacts.os, "open", deny)
        with pytest.raises(OutputError, match=r"write .*a\.json: Permission denied"):
            write_json_atomic(tmp_path / "a.json", {})

    def full(self, *a, **k):  # the write itself fails: disk full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", full)
        with pytest.raises(OutputError, match=r"write .*b\.json: No space left"):
            write_json_atomic(tmp_path / "b.json", {})
        with pytest.raises(OutputError, match=r"cannot write .*out/c\.txt: No space left"):  # named under final
            with atomic_dir(tmp_path / "out") as d:
                write_text_atomic(d / "c.txt", "x")
    assert not (tmp_path / "out").exists()

    def torch_fails(*a, **k):  # torch.save failing on its own (not a write: it serialises into memory)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    m_ = build_model("mobilenetv2_035", num_classes=10)
    with monkeypatch.context() as m:
        m.setattr(torch, "save", torch_fails)
        with pytest.raises(RuntimeError, match="unexpected pos"):  # not a write error: passes through as it is
            save_checkpoint(tmp_path / "c.pt", m_, make_arch(m_, "mobilenetv2_035", 10))
    with monkeypatch.context() as m:  # a checkpoint's bytes are written by Python: a full disk is its OSError
        m.setattr(Path, "write_bytes", full)
        with pytest.raises(OutputError, match=r"write .*d\.pt: No space left"):
            save_checkpoint(tmp_path / "d.pt", m_, make_arch(m_, "mobilenetv2_035", 10))
    assert not hidden(tmp_path) and sorted(p.name for p in tmp_path.iterdir()) == []


def test_errors_that_are_not_about_the_output_pass_through(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):  # reading an input inside the block is not a write error
        with atomic_path(tmp_path / "a.txt"):
            (tmp_path / "missing").read_text()
    with pytest.raises(LatoptError, match="^a check$"):
        with atomic_dir(tmp_path / "d"):
            raise LatoptError("a check")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------- modes
@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_new_outputs_honour_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        f = write_json_atomic(tmp_path / "a.json", {})
        with atomic_dir(tmp_path / "d") as d:
            write_text_atomic(d / "x.txt", "x")
        onnx = export_onnx(torch.nn.Conv2d(3, 2, 1), (1, 3, 4, 4), tmp_path / "m.onnx")
    finally:
        os.umask(old)
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(onnx.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((tmp_path / "d" / "x.txt").stat().st_mode) == 0o666 & ~mask


def test_replaced_outputs_keep_their_mode(tmp_path: Path, umask_077: None) -> None:
    f = tmp_path / "a.json"
    f.write_text("{}")
    f.chmod(0o640)
    write_json_atomic(f, {"new": 1})
    assert stat.S_IMODE(f.stat().st_mode) == 0o640 and json.loads(f.read_text()) == {"new": 1}
    d = tmp_path / "d"
    d.mkdir()
    d.chmod(0o751)
    with atomic_dir(d) as tmp:
        (tmp / "x").write_text("x")
    assert stat.S_IMODE(d.stat().st_mode) == 0o751 and (d / "x").is_file()


# --------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", ["run", "mobilenetv2_100", "cpu-test", "v1.2", "A" * 200])
def test_valid_names(name: str) -> None:
    assert check_name(name, "name") == name


@pytest.mark.parametrize("name", ["../../x", "..", ".", ".hidden", "a/b", "/abs", "a\\b", "", "a b", "-x", "A" * 201,
                                  "x\n", 5, None])
def test_names_are_not_paths(name: object) -> None:
    with pytest.raises(LatoptError, match="is not a valid name"):
        check_name(name, "name")


def test_search_study_name_is_not_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\nmodel: {name: mobilenetv2_035}\n")
    runs = tmp_path / "a" / "runs"
    for extra in ([], ["--show"]):
        rc = main(["search", "--config", str(cfg), "--study", "../../x", "--runs-dir", str(runs), *extra])
        assert rc == 2
        line = one_line_error(capsys.readouterr().err)
        assert "study '../../x' is not a valid name" in line and line.endswith("(option --study)"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_profile_with_a_device_named_like_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dev = tmp_path / "a" / "b" / "dev.yaml"
    dev.parent.mkdir(parents=True)
    dev.write_text("name: ../../x\n")
    rc = main(["profile", "--device", str(dev), "--model", "mobilenetv2_035", "--resolution", "16", "--quiet"])
    assert rc == 2
    assert "key 'name' = '../../x' is not a valid name" in one_line_error(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "dev.yaml"]


@pytest.mark.parametrize("suffix, text", [(".json", "[" * 100_000), (".yaml", "[" * 100_000),
                                          (".yaml", "a: [1, 2"), (".yaml", "\udcff")])
def test_unreadable_json_and_yaml_are_one_line(tmp_path: Path, suffix: str, text: str) -> None:
    # absurd nesting made json.loads raise RecursionError (a traceback) before; binary YAML a UnicodeDecodeError
    path = tmp_path / f"f{suffix}"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(LatoptError) as e:
        read_json(path, what="LUT") if suffix == ".json" else read_yaml(path, what="config file")
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_deeply_nested_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("[" * 100_000)
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error: config file") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_signal_right_after_the_temp_is_created_leaves_nothing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C landing between mkstemp/mkdtemp creating the temp entry and the cleanup's try left .NAME.XXXX
    real_open, real_mkdir = os.open, Path.mkdir

    def open_then_interrupt(path, *a, **k):
        os.close(real_open(path, *a, **k))
        raise KeyboardInterrupt

    def mkdir_then_interrupt(self, *a, **k):
        real_mkdir(self, *a, **k)
        if self.name.startswith("."):
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(artifacts.os, "open", open_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            write_json_atomic(tmp_path / "a.json", {})
    with monkeypatch.context() as m:
        m.setattr(Path, "mkdir", mkdir_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            with atomic_dir(tmp_path / "out"):
                pass
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, match", [(["--threads", "-1"], "--threads must be >= 0"),
                                         (["--gpu", "-2"], "--gpu must be a CUDA device index")])
def test_runtime_refuses_negative_counts(tiny_onnx: Path, args: list[str], match: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert runtime_cli.main([str(tiny_onnx), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1


def test_a_checkpoint_with_damaged_pickle_bytes_is_one_line(tmp_path: Path) -> None:
    # torch's weights_only unpickler fails on damaged data.pkl bytes with KeyError / IndexError (tracebacks before)
    import zipfile

    from latopt.files.checkpoint import load_checkpoint

    m = build_model("mobilenetv2_035", num_classes=10)
    good = save_checkpoint(tmp_path / "good.pt", m, make_arch(m, "mobilenetv2_035", 10))
    for n, junk in enumerate([b"\x80\x02h\x21.", b"\x80\x02.", b"\x80\x02]q\x00(K\x01"]):
        bad = tmp_path / f"bad{n}.pt"
        with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w") as zout:
            for item in zin.infolist():
                data = zin.read(item.filename)
                zout.writestr(item, junk if item.filename.endswith("data.pkl") else data)
        with pytest.raises(LatoptError) as e:
            load_checkpoint(bad)
        assert "\n" not in str(e.value) and str(bad) in str(e.value)


@pytest.mark.slow   # a latopt subprocess under ulimit -f
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE semantics of Linux")
def test_a_file_size_limit_is_one_line(tmp_path: Path) -> None:
    # under `ulimit -f` torch.save failed with its own RuntimeError ("unexpected pos ...") on a disk with room
    code = textwrap.dedent(f"""
        import resource, sys, torch
        from latopt.cli import main
        from latopt.nets.models import build_model
        from latopt.files.checkpoint import make_arch, save_checkpoint
        m = build_model("mobilenetv2_035", num_classes=10)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
        from latopt.files.artifacts import OutputError
        try:
            save_checkpoint({str(tmp_path / "c.pt")!r}, m, make_arch(m, "mobilenetv2_035", 10))
        except OutputError as e:
            print(e); sys.exit(7)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 7, r.stderr[-2000:]
    assert "file size limit" in r.stdout and "c.pt" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_temp_name_taken_by_another_writer_is_skipped_and_never_removed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    names = iter(["aaaaaaaa", "bbbbbbbb", "aaaaaaaa", "cccccccc"])
    monkeypatch.setattr(artifacts.secrets, "token_hex", lambda n: next(names))
    theirs = tmp_path / ".a.json.aaaaaaaa.tmp"     # another process's temp file, under the first name drawn
    theirs.write_text("theirs")
    write_json_atomic(tmp_path / "a.json", {"x": 1})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1} and theirs.read_text() == "theirs"
    with pytest.raises(KeyboardInterrupt):       # interrupted while writing: only our own temp file goes
        with atomic_path(tmp_path / "a.json") as tmp:
            assert tmp.name == ".a.json.cccccccc.tmp"
            raise KeyboardInterrupt
    assert theirs.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a.json.aaaaaaaa.tmp", "a.json"]


# ------------------------------------------------------------------------- links
def test_a_link_in_an_output_directory_is_kept_as_a_link_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere.txt").write_text("theirs")
    (out / "mine").symlink_to(tmp_path / "elsewhere.txt")
    (out / "zero").symlink_to("/dev/zero")        # followed, it would be copied until the disk is full
    with atomic_dir(out) as tmp:
        (tmp / "new.json").write_text("{}")
    assert (out / "new.json").is_file()
    assert os.readlink(out / "zero") == "/dev/zero" and os.readlink(out / "mine") == str(tmp_path / "elsewhere.txt")
    assert (tmp_path / "elsewhere.txt").read_text() == "theirs"


def test_a_fifo_in_an_output_directory_is_one_line_and_nothing_changes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "pipe")
    with pytest.raises(LatoptError, match=r"pipe.*not a regular file"):
        with atomic_dir(out) as tmp:
            (tmp / "new.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and sorted(os.listdir(out)) == ["pipe"]


def test_a_file_output_that_is_a_link_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "sub" / "new.json")   # as cp does: the target is created
    write_json_atomic(dangling, {"b": 2})
    assert dangling.is_symlink() and json.loads((tmp_path / "sub" / "new.json").read_text()) == {"b": 2}
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OutputError):
        write_json_atomic(loop, {})


def test_an_output_directory_that_is_a_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("k")
    link = tmp_path / "out"
    link.symlink_to(real)
    with atomic_dir(link) as tmp:
        (tmp / "new.json").write_text("{}")
    assert link.is_symlink() and (real / "new.json").is_file() and (real / "keep.txt").read_text() == "k"


def test_output_to_a_link_to_a_device_writes_the_device(tmp_path: Path) -> None:
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


# --------------------------------------------------------------- YAML aliases, duplicate keys
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize(("text", "problem"), [
    ("name: &n quickstart\nmodel: {name: *n}\n", "an alias (*name)"),   # an aliased value: 58 MB lines before
    (LAUGHS, "an alias (*name)"),                                        # the billion laughs
    ("train: {lr: 0.1}\ntrain: {lr: 0.2}\n", "the key 'train' is given twice"),
    ("train:\n  lr: 0.1\n  lr: 0.2\n", "the key 'lr' is given twice"),
])
def test_yaml_aliases_and_duplicate_keys_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      text: str, problem: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(LatoptError) as e:
        read_yaml(cfg, what="config file")
    assert problem in str(e.value) and "at line" in str(e.value) and len(str(e.value)) < 300
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
    dev = tmp_path / "dev.yaml"
    dev.write_text(text)
    with pytest.raises(LatoptError, match="device profile"):
        from latopt.latency.devices import load_device

        load_device(str(dev))


def test_error_lines_are_one_printable_line_of_bounded_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from latopt.errors import MAX_ERROR_LINE, one_line

    assert one_line("a\nb\rc\x1bd → ×") == "a\\nb\\rc\\x1bd → ×"
    long = one_line("x" * 10_000_000)
    assert len(long) <= MAX_ERROR_LINE and long.endswith("more characters)")
    weird = tmp_path / "new\nline.yaml"             # a newline in a path that the error names
    assert main(["train", "--config", str(weird)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "new\\nline.yaml" in err
    cfg = tmp_path / "huge.yaml"
    cfg.write_text("name: " + "a" * 2_000_000 + "\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and len(err) <= MAX_ERROR_LINE + 20


def test_a_pipe_whose_reader_closes_early_is_a_failed_write(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def reader() -> None:
        with open(fifo, "rb") as f:
            f.read(1)                       # then closes: the rest cannot be written

    t = threading.Thread(target=reader)
    t.start()
    with pytest.raises(OutputError, match=r"write .*pipe: its reader closed"):
        artifacts.write_bytes_atomic(fifo, b"x" * 8_000_000)
    t.join()


def test_an_os_error_without_errno_never_reads_success(tmp_path: Path) -> None:
    assert "Success" not in str(OutputError.from_os(tmp_path / "out", OSError(0, "")))
    assert "Success" not in str(OutputError.from_os(tmp_path / "out", OSError("short write")))


@pytest.mark.slow   # latopt subprocesses
def test_an_ascii_locale_and_a_full_stdout_are_handled(tmp_path: Path) -> None:
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"}
    r = subprocess.run([sys.executable, "-m", "latopt", "inspect", "mobilenetv2_035", "--resolution", "32"],
                       capture_output=True, env=env)
    assert r.returncode == 0 and b"Traceback" not in r.stderr and r.stdout, r.stderr[-500:]
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "latopt", "inspect", "mobilenetv2_035", "--resolution", "32"],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "latopt: error: cannot write the standard output: No space left on device"], r.stderr[-500:]


def test_the_longest_name_makes_every_file_name_latopt_builds(tmp_path: Path) -> None:
    name = "n" * 200
    check_name(name, "device")
    write_json_atomic(tmp_path / f"lut-{name}.json", {})       # its temp entry is the longest file name
    with atomic_dir(tmp_path / name) as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / name / "x").is_file()


@pytest.mark.parametrize(("make", "match"), [
    (lambda p: np.savez(p.with_suffix(".npz"), a=np.zeros((1, 3, 8, 8))) or p.with_suffix(".npz"), "an .npz archive"),
    (lambda p: np.save(p, np.zeros((0, 3, 8, 8), np.float32)) or p, "at least one sample"),
    (lambda p: np.save(p, np.array(["a", "b"])) or p, "holds <U1 values"),
    (lambda p: np.save(p, np.full((1, 3, 8, 8), np.nan, np.float32)) or p, "NaN or infinite"),
    (lambda p: np.save(p, np.zeros((1, 5, 8, 8), np.float32)) or p, "does not fit the model's input"),
    (lambda p: (p.write_bytes(b"\x93NUMPY junk"), p)[1], "not a valid .npy file"),
])
def test_runtime_inputs_are_one_line(tiny_onnx: Path, tmp_path: Path, make, match: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path / "x.npy")
    assert runtime_cli.main([str(tiny_onnx), "--input", str(path), "--output", str(tmp_path / "y.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "y.npy").exists()


def test_runtime_writes_to_a_fifo(tiny_onnx: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "y.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    t.start()
    assert runtime_cli.main([str(tiny_onnx), "--output", str(fifo)]) == 0
    t.join()
    assert np.load(io.BytesIO(got[0])).shape == (1, 4, 6, 6)


def test_a_file_where_a_directory_must_be_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    from latopt.search._storage import open_storage

    with pytest.raises(LatoptError, match=r"cannot create .*Not a directory"):
        open_storage(f"sqlite:///{tmp_path / 'file' / 'sub' / 'x.db'}", heartbeat_interval=None)
    assert main(["run", "--runs-dir", str(tmp_path / "file"), "--trials", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("latopt: error: cannot write") and "file" in err[0], err


@pytest.mark.parametrize("exc", [MemoryError(), RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: "
                                                             "can't allocate memory: you tried to allocate 1e12 bytes"),
                                 OSError(errno.ENOMEM, "Cannot allocate memory")])
def test_out_of_memory_is_one_line(exc: BaseException, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import latopt.cli.inspect as inspect_cli

    def boom(args):
        raise exc

    monkeypatch.setattr(inspect_cli, "_cmd_inspect", boom)
    from latopt.cli import build_parser

    args = build_parser().parse_args(["inspect", "mobilenetv2_035"])
    assert args.func is boom
    assert main(["inspect", "mobilenetv2_035"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("latopt: error: out of memory"), err


def test_absurd_thread_counts_and_batches_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", "quickstart", "--threads", "10000", "--out", str(tmp_path / "o")]) == 2
    assert "'threads' must be in [1, 1024], got 10000" in capsys.readouterr().err
    dev = tmp_path / "d.yaml"
    dev.write_text("name: d\nbackend: onnxruntime\nbatch: 100000\n")
    from latopt.latency.devices import load_device

    with pytest.raises(LatoptError, match=r"'batch' must be in \[1, 4096\]"):
        load_device(str(dev))
