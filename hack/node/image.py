#!/usr/bin/env python3
"""Writes a one-layer container image as a docker-archive tar (what `docker save`
writes and `ctr images import` reads), without a container engine.

    image.py --tag flowline.local/toolbox:1 --out toolbox.tar \
        --file /bin/busybox:/bin/busybox:0755 --symlink busybox:/bin/sh \
        --dir /tmp:1777 --entrypoint '["/bin/sh"]' --user 65532:65532

Every entry is owned by 0:0 unless given as --file SRC:DEST:MODE:UID:GID, and has
mtime 0, so the same inputs give the same image digest. Parent directories are
added (0755) as needed. --file reads SRC through symlinks.
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile

ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
          "s390x": "s390x", "riscv64": "riscv64"}


def entries(args):
    """(path in image, kind, payload, mode, uid, gid), parents first."""
    out = {}

    def add(path, kind, payload, mode, uid=0, gid=0):
        path = "/" + path.strip("/")
        parent = os.path.dirname(path)
        while parent != "/" and parent not in out:
            out[parent] = ("dir", None, 0o755, 0, 0)
            parent = os.path.dirname(parent)
        out[path] = (kind, payload, mode, uid, gid)

    for spec in args.dir:
        path, mode, *owner = spec.split(":")
        uid, gid = (int(owner[0]), int(owner[1])) if owner else (0, 0)
        add(path, "dir", None, int(mode, 8), uid, gid)
    for spec in args.file:
        src, dest, *rest = spec.split(":")
        mode = int(rest[0], 8) if rest else 0o644
        uid, gid = (int(rest[1]), int(rest[2])) if len(rest) > 2 else (0, 0)
        add(dest, "file", src, mode, uid, gid)
    for spec in args.symlink:
        target, dest = spec.split(":")
        add(dest, "symlink", target, 0o777)
    for spec in args.text:
        dest, content = spec.split(":", 1)
        add(dest, "text", content.replace("\\n", "\n").encode(), 0o644)
    return sorted(out.items())


def layer(path, args):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, (kind, payload, mode, uid, gid) in entries(args):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.mtime, info.mode, info.uid, info.gid = 0, mode, uid, gid
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            elif kind == "text":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.size = os.path.getsize(payload)
                with open(payload, "rb") as f:
                    tar.addfile(info, f)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--file", action="append", default=[], metavar="SRC:DEST[:MODE[:UID:GID]]")
    p.add_argument("--dir", action="append", default=[], metavar="DEST:MODE[:UID:GID]")
    p.add_argument("--symlink", action="append", default=[], metavar="TARGET:DEST")
    p.add_argument("--text", action="append", default=[], metavar="DEST:CONTENT")
    p.add_argument("--entrypoint", default="null", help="JSON list")
    p.add_argument("--cmd", default="null", help="JSON list")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--workdir", default="/")
    args = p.parse_args()

    work = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(args.out)))
    try:
        layer_tar = os.path.join(work, "layer.tar")
        layer(layer_tar, args)
        diff_id = sha256_of(layer_tar)
        config = {
            "architecture": ARCHES.get(os.uname().machine, os.uname().machine),
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {
                "Entrypoint": json.loads(args.entrypoint),
                "Cmd": json.loads(args.cmd),
                "Env": args.env,
                "User": args.user,
                "WorkingDir": args.workdir,
            },
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hack/node/image.py"}],
        }
        config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        manifest = [{"Config": config_name, "RepoTags": [args.tag], "Layers": [diff_id + "/layer.tar"]}]
        tmp_out = args.out + ".tmp"
        with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as tar:
            def add_bytes(name, data):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
            dir_info = tarfile.TarInfo(diff_id)
            dir_info.type, dir_info.mode, dir_info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(dir_info)
            info = tarfile.TarInfo(diff_id + "/layer.tar")
            info.size, info.mtime, info.mode = os.path.getsize(layer_tar), 0, 0o644
            with open(layer_tar, "rb") as f:
                tar.addfile(info, f)
            add_bytes(config_name, config_bytes)
            add_bytes("manifest.json", json.dumps(manifest).encode())
        os.replace(tmp_out, args.out)
        print("sha256:" + hashlib.sha256(config_bytes).hexdigest())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
