"""CURVE keys and socket security for the bus (the pyzmq ``zmq.auth`` recipe, made explicit).

Roles: the side that BINDS is the CURVE server and checks connecting clients against an
allow-list directory of public keys (``*.key`` files) through a ZAP authenticator thread
on its zmq.Context; the side that CONNECTS is a client and must know the server's public
key. CURVE is off unless a CurveConfig is given; use it for anything that crosses a host
(``requires_curve``). Secret keys are never printed or logged.

Launched nodes get ``--curve-secret FILE`` (their own key pair) and ``--curve-map FILE``
(the launcher's curve.json: ``{address: {server_key, allow}}``); ``curve_for`` turns the
two into the CurveConfig of one endpoint, and ``curve_configs`` into the per-endpoint
mapping that Publisher/Subscriber accept as ``curve=``.

An allow-list directory is an ``AllowList``: ``NAME.key`` is the key of the peer NAME (a
robot's key is named after the robot). It is kept current while the process runs: a socket
that binds with it re-reads the directory about once a second (``refresh``) and, when a key
was removed, ends every session on its endpoints, so each client handshakes again and the
revoked one is refused (docs/wire.md, "Security: CURVE").
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85


@dataclass(frozen=True)
class CurveConfig:
    """Paths only; keys are read when a socket is set up.

    secret_key_file: this node's ``*.key_secret`` (holds its public and secret key).
    server_public_key_file: the binding peer's ``*.key`` (required when connecting).
    allowed_clients_dir: directory of client ``*.key`` files (required when binding).
    """

    secret_key_file: str | os.PathLike
    server_public_key_file: str | os.PathLike | None = None
    allowed_clients_dir: str | os.PathLike | None = None


class CurveSetupError(ValueError):
    """A key file, curve map or allow-list that cannot be used; the message says the fix."""


def requires_curve(endpoint: str) -> bool:
    """True for endpoints that can leave the host (tcp://), which should use CURVE."""
    return endpoint.startswith("tcp://")


def generate(directory: str | os.PathLike, name: str) -> tuple[Path, Path]:
    """Create ``name.key`` and ``name.key_secret`` in ``directory``; returns (public, secret).

    The directory is made 0700 *before* the files are written, so the secret is never
    reachable by other users, then the secret file is set to 0600.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    public, secret = zmq.auth.create_certificates(d, name)
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def load_public(path: str | os.PathLike) -> bytes:
    """The Z85 public key in a ``.key`` or ``.key_secret`` file (ValueError if none)."""
    return zmq.auth.load_certificate(path)[0]


def load_keypair(path: str | os.PathLike) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file.

    Refuses (ValueError) a file without a secret key or one readable by group/others,
    like ssh does, so a leaked-permission key is noticed instead of silently used.
    """
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(
            f"secret key file {path} is accessible by group/others "
            f"(mode {stat.S_IMODE(mode):o}); run: chmod 600 {path}"
        )
    public, secret = zmq.auth.load_certificate(path)
    if secret is None:
        raise ValueError(f"{path} holds no secret key; pass the .key_secret file, not the .key")
    return public, secret


def load_secret(path: str | os.PathLike) -> bytes:
    """The Z85 secret key in a ``.key_secret`` file (same checks as load_keypair)."""
    return load_keypair(path)[1]


def secure_socket(sock: zmq.Socket, cfg: CurveConfig, *, server: bool) -> None:
    """Set CURVE options on ``sock``; call before bind/connect.

    A server also needs ``acquire_authenticator`` on its context, or libzmq accepts any
    client that knows the server key.
    """
    public, secret = load_keypair(cfg.secret_key_file)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    if server:
        sock.curve_server = True
        return
    if cfg.server_public_key_file is None:
        raise ValueError("CurveConfig.server_public_key_file is required on the connecting side")
    sock.curve_serverkey = load_public(cfg.server_public_key_file)


def secure_endpoint(
    sock: zmq.Socket, cfg: CurveConfig | None, *, server: bool, any_curve: bool = True
) -> None:
    """The security of the next bind/connect of ``sock``: CURVE as ``cfg`` says, or NULL
    (None) where the socket has CURVE on another endpoint (``any_curve``). libzmq copies the
    security options at each bind/connect, so each endpoint gets its own server key."""
    if cfg is not None:
        secure_socket(sock, cfg, server=server)
    elif any_curve:
        sock.curve_server = False


class AllowList:
    """The client keys of an allow-list directory, by name: ``NAME.key`` holds NAME's key.

    ``names`` maps each Z85 public key (str, 40 characters) to its name. ``refresh`` re-reads
    the directory when a ``*.key`` file was added, removed or changed (one listing and a stat
    per file; nothing when unchanged). A file that does not parse (say, half copied) is left
    out until it changes again. Shared by the threads of one process (see ``allow_list``):
    ``names`` is replaced whole, never edited, so a reader sees one version or the other;
    refreshes take turns (the ZAP thread's and the binding socket's).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = str(Path(directory).resolve())
        if not os.path.isdir(self.directory):
            raise ValueError(f"allowed_clients_dir {self.directory} is not a directory")
        self.names: dict[str, str] = {}
        self._seen: frozenset | None = None
        self._lock = threading.Lock()
        self.refresh()

    def _listing(self) -> frozenset:
        out = []
        with os.scandir(self.directory) as entries:
            for e in entries:
                if e.name.endswith(".key"):
                    try:
                        st = e.stat()
                    except OSError:
                        continue  # removed meanwhile
                    out.append((e.name, st.st_mtime_ns, st.st_size))
        return frozenset(out)

    def refresh(self) -> bool:
        """Re-read the directory if it changed; True if it did. A directory that went away
        reads as empty (every key revoked)."""
        with self._lock:
            try:
                listing = self._listing()
            except OSError:
                listing = frozenset()
            if listing == self._seen:
                return False
            names = {}
            for name, _, _ in sorted(listing):
                try:
                    key = load_public(os.path.join(self.directory, name)).decode()
                except (OSError, ValueError):
                    continue
                names[key] = name[: -len(".key")]
            self._seen, self.names = listing, names
            return True

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's ZAP credentials check (``configure_curve_callback``): the Z85 key is listed,
        as the directory is now: a key it does not list yet is looked for once more (a fleet
        writes a robot's key as it places it, and the robot tries at once; ~0.1 ms a look)."""
        z = key.decode()
        return z in self.names or (self.refresh() and z in self.names)


_allow_lock = threading.Lock()
_allow_lists: dict[str, AllowList] = {}  # resolved directory -> its one AllowList


def allow_list(directory: str | os.PathLike) -> AllowList:
    """The process's one AllowList of ``directory`` (created on first use): the ZAP handler,
    every socket binding with it, and rtinfer.transport.identity see the same keys."""
    location = str(Path(directory).resolve())
    with _allow_lock:
        found = _allow_lists.get(location)
        if found is None:
            found = _allow_lists[location] = AllowList(location)
        return found


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP thread, asking an AllowList; User-Id is the client's Z85 public key."""

    def curve_user_id(self, client_public_key: bytes) -> str:
        return z85.encode(client_public_key).decode("ascii")


# One ZAP handler per context (libzmq allows one bind of inproc://zeromq.zap.01 per context),
# shared by every CURVE server socket on that context and stopped with the last of them.
_auth_lock = threading.Lock()
_auths: dict[int, list] = {}  # id(ctx) -> [authenticator, refcount, allow-list dir]


def acquire_authenticator(
    ctx: zmq.Context, allowed_clients_dir: str | os.PathLike | None
) -> AllowList:
    """Start (or share) the allow-list authenticator on ``ctx``; returns its AllowList.

    Each handshake is checked against the AllowList as the directory is then (a key not
    listed makes it look again); the socket that binds re-reads it about once a second, to
    cut the sessions of a key removed (rtinfer.transport.bus.watch). All CURVE servers on one
    context must use the same directory (ValueError otherwise).
    """
    if allowed_clients_dir is None:
        raise ValueError(
            "CurveConfig.allowed_clients_dir is required on the binding side "
            "(the allow-list of client public keys)"
        )
    allow = allow_list(allowed_clients_dir)  # ValueError if it is not a directory
    location = allow.directory
    with _auth_lock:
        entry = _auths.get(id(ctx))
        if entry is not None:
            if entry[2] != location:
                raise ValueError(
                    f"context already authenticates against {entry[2]}, not {location}"
                )
            entry[1] += 1
            return allow
        auth = _Authenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=allow)
        _auths[id(ctx)] = [auth, 1, location]
    return allow


def release_authenticator(ctx: zmq.Context) -> None:
    """Drop one reference; the last one stops the authenticator thread (blocks briefly)."""
    with _auth_lock:
        entry = _auths.get(id(ctx))
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _auths[id(ctx)]
    entry[0].stop()


def read_curve_map(path: str | os.PathLike) -> dict[str, dict]:
    """The launcher's curve.json: {address: {"server_key": path, "allow": dir}}."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise CurveSetupError(
            f"cannot read curve map {path}: {exc}; pass the curve.json the "
            "launcher wrote (--curve-map ${curve_map})"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CurveSetupError(f"curve map {path} is not {{address: {{server_key, allow}}}}")
    return data


def curve_for(
    endpoint: str, *, bind: bool, secret: str | None, curve_map: str | os.PathLike | dict | None
) -> CurveConfig | None:
    """The CurveConfig for one endpoint, or None where the map does not list it (plaintext).

    bind: this socket binds ``endpoint`` (CURVE server, checks the ``allow`` directory) or
    connects to it (client, trusts ``server_key``). ``curve_map`` is a curve.json path or
    its parsed dict. Every file is checked here, before any socket exists: a missing or
    unreadable key, a missing allow-list, or a listed endpoint without ``secret`` raises
    CurveSetupError naming the file and the fix.
    """
    if not curve_map:
        return None
    if isinstance(curve_map, dict):
        return _curve_for(endpoint, bind, secret, curve_map, "the curve map")
    return _curve_for(endpoint, bind, secret, read_curve_map(curve_map), str(curve_map))


def _curve_for(
    endpoint: str, bind: bool, secret: str | None, table: dict, source: str
) -> CurveConfig | None:
    entry = table.get(endpoint)
    if entry is None or not requires_curve(endpoint):
        return None
    if not secret:
        raise CurveSetupError(
            f"{endpoint} requires CURVE ({source}) but this node has no key: "
            "pass --curve-secret FILE.key_secret (in a launch file: set "
            "curve_secret: on the node)"
        )
    try:
        load_keypair(secret)
    except OSError as exc:
        raise CurveSetupError(
            f"cannot read secret key {secret}: {exc.strerror}; create it "
            "with `rtinfer keys generate DIR --name NAME`"
        ) from None
    except ValueError as exc:
        raise CurveSetupError(str(exc)) from None
    if bind:
        allow = entry.get("allow")
        if not allow or not os.path.isdir(allow):
            raise CurveSetupError(
                f"{endpoint}: allow-list directory {allow!r} ({source}) does "
                "not exist; create it and copy the clients' public .key "
                "files into it"
            )
        return CurveConfig(secret, allowed_clients_dir=allow)
    server_key = entry.get("server_key")
    try:
        load_public(server_key)
    except (OSError, ValueError, TypeError):
        raise CurveSetupError(
            f"{endpoint}: cannot read the server's public key {server_key!r} "
            f"({source}); copy the .key of the node that binds it there"
        ) from None
    return CurveConfig(secret, server_public_key_file=server_key)


def add_curve_arguments(ap: argparse.ArgumentParser) -> None:
    """The --curve-secret / --curve-map options of every node's command line."""
    ap.add_argument("--curve-secret", default=None, help="this node's .key_secret (CURVE)")
    ap.add_argument("--curve-map", default=None, help="the launcher's curve.json")


def curve_from_args(
    ap: argparse.ArgumentParser,
    a: argparse.Namespace,
    *,
    binds: Iterable[str | None] = (),
    connects: Iterable[str | None] = (),
) -> dict[str, CurveConfig] | None:
    """curve_configs from parsed add_curve_arguments options. Call it before any socket (or
    model) is set up: a bad key setup is a usage error (ap.error, exit 2)."""
    try:
        return curve_configs(
            binds=binds, connects=connects, secret=a.curve_secret, curve_map=a.curve_map
        )
    except CurveSetupError as exc:
        ap.error(str(exc))


def curve_configs(
    *,
    binds: Iterable[str | None] = (),
    connects: Iterable[str | None] = (),
    secret: str | None = None,
    curve_map: str | os.PathLike | None = None,
) -> dict[str, CurveConfig] | None:
    """{endpoint: CurveConfig} for the CURVE endpoints a node binds and connects (None
    entries in the lists are skipped); None if there are none, so ipc runs are unchanged.

    The result is a valid ``curve=`` for every Publisher/Subscriber of the node: each socket
    looks up its own endpoints. Raises CurveSetupError (see curve_for).
    """
    if not curve_map:
        if secret:
            raise CurveSetupError(
                "--curve-secret needs --curve-map (the launcher's curve.json, "
                "${curve_map}) to know which endpoints use CURVE"
            )
        return None
    table = read_curve_map(curve_map)
    out: dict[str, CurveConfig] = {}
    for eps, bind in ((binds, True), (connects, False)):
        for ep in eps:
            if not ep:
                continue
            cfg = _curve_for(ep, bind, secret, table, str(curve_map))
            if cfg is not None:
                out[ep] = cfg
    return out or None
