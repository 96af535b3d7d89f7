"""Peer baseline: LeRobot's async-inference transport (gRPC + pickle), reproduced faithfully.

PEER CODE, never used by rtinfer: LeRobot's protocol pickles observations and action
chunks, so this module does too (it is on the hygiene test's allow-list for that reason;
an unauthenticated pickle endpoint is exactly the hole rtinfer's msgpack wire avoids).
lerobot itself is not installed because it pins another torch; this reproduces
`lerobot/transport/services.proto` (service `transport.AsyncInference`) and the
behaviour of `async_inference/policy_server.py` + `robot_client.py`:
- messages are built from the same proto definitions at import (no generated stubs), so
  the bytes on the wire are what lerobot's stubs send;
- Ready, then SendPolicyInstructions(pickled config), then per cycle a client-streaming
  SendObservations of a pickled TimedObservation in 2 MB TransferState chunks;
- the server keeps a 1-slot observation queue; GetActions waits on it up to
  obs_queue_timeout, computes the chunk, pickles list[TimedAction] and sleeps to
  `inference_latency` (LeRobot's default 1/30 s; 0 here unless set, so as not to pad it);
- the client's receiver thread calls GetActions back to back (LeRobot's loop; the
  server-side queue wait is the poll), with lerobot's channel options (4 MB, retries).
"""

from __future__ import annotations

import argparse
import json
import pickle  # the PEER's protocol (LeRobot pickles); never used by rtinfer itself
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from peers.rtinfer_bus import respond_chunk

SERVICE = "transport.AsyncInference"
CHUNK_SIZE = 2 * 1024 * 1024  # lerobot.transport.utils.CHUNK_SIZE
MAX_MESSAGE = 4 * 1024 * 1024  # lerobot.transport.utils.MAX_MESSAGE_SIZE
BEGIN, MIDDLE, END = 1, 2, 3  # TransferState


def _messages() -> dict:
    f = descriptor_pb2.FileDescriptorProto(
        name="lerobot_services.proto", package="transport", syntax="proto3"
    )
    enum = f.enum_type.add(name="TransferState")
    states = ("TRANSFER_UNKNOWN", "TRANSFER_BEGIN", "TRANSFER_MIDDLE", "TRANSFER_END")
    for i, n in enumerate(states):
        enum.value.add(name=n, number=i)
    F = descriptor_pb2.FieldDescriptorProto
    messages = {
        "Observation": [("transfer_state", 1), ("data", 2)],
        "Actions": [("data", 1)],
        "PolicySetup": [("data", 1)],
        "Empty": [],
    }
    for name, fields in messages.items():
        m = f.message_type.add(name=name)
        for fname, num in fields:
            enum_field = fname == "transfer_state"
            m.field.add(
                name=fname,
                number=num,
                label=F.LABEL_OPTIONAL,
                type=F.TYPE_ENUM if enum_field else F.TYPE_BYTES,
                type_name=".transport.TransferState" if enum_field else None,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"transport.{n}"))
        for n in ("Observation", "Actions", "PolicySetup", "Empty")
    }


MSG = _messages()


@dataclass
class TimedObservation:  # lerobot.async_inference.helpers.TimedObservation
    timestamp: float
    timestep: int
    observation: dict
    must_go: bool = False


@dataclass
class TimedAction:  # lerobot.async_inference.helpers.TimedAction
    timestamp: float
    timestep: int
    action: np.ndarray = field(default=None)


class PolicyServer:
    def __init__(self, obs_queue_timeout: float = 2.0, inference_latency: float = 0.0, dt=0.05):
        self.obs_queue: queue.Queue = queue.Queue(maxsize=1)
        self.timeout, self.latency, self.dt = obs_queue_timeout, inference_latency, dt
        self.config = None

    def Ready(self, request, context):  # noqa: N802
        self.obs_queue = queue.Queue(maxsize=1)
        return MSG["Empty"]()

    def SendPolicyInstructions(self, request, context):  # noqa: N802
        self.config = pickle.loads(request.data)  # the peer protocol: pickled config
        return MSG["Empty"]()

    def SendObservations(self, request_iterator, context):  # noqa: N802
        buf = bytearray()
        for item in request_iterator:  # lerobot.transport.utils.receive_bytes_in_chunks
            if item.transfer_state == BEGIN:
                buf = bytearray(item.data)
            else:
                buf += item.data
            if item.transfer_state == END:
                obs = pickle.loads(bytes(buf))
                if self.obs_queue.full():  # keep only the newest, as lerobot does
                    self.obs_queue.get_nowait()
                self.obs_queue.put(obs)
        return MSG["Empty"]()

    def GetActions(self, request, context):  # noqa: N802
        start = time.perf_counter()
        try:
            obs = self.obs_queue.get(timeout=self.timeout)
        except queue.Empty:
            return MSG["Empty"]()
        chunk = respond_chunk(obs.observation["state"])
        actions = [
            TimedAction(obs.timestamp + i * self.dt, obs.timestep + i, a)
            for i, a in enumerate(chunk)
        ]
        reply = MSG["Actions"](data=pickle.dumps(actions))
        time.sleep(max(0.0, self.latency - (time.perf_counter() - start)))
        return reply


def serve(port: int, **kw) -> grpc.Server:
    """Start a PolicyServer on 127.0.0.1:port (lerobot uses a 4-worker thread pool)."""
    ps, E = PolicyServer(**kw), MSG["Empty"]
    handlers = {
        "Ready": grpc.unary_unary_rpc_method_handler(ps.Ready, E.FromString, E.SerializeToString),
        "SendPolicyInstructions": grpc.unary_unary_rpc_method_handler(
            ps.SendPolicyInstructions, MSG["PolicySetup"].FromString, E.SerializeToString
        ),
        "SendObservations": grpc.stream_unary_rpc_method_handler(
            ps.SendObservations, MSG["Observation"].FromString, E.SerializeToString
        ),
        "GetActions": grpc.unary_unary_rpc_method_handler(
            ps.GetActions, E.FromString, MSG["Actions"].SerializeToString
        ),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def channel_options(initial_backoff: str = "0.0500s") -> list:
    """lerobot.transport.utils.grpc_channel_options (the client passes environment_dt)."""
    cfg = {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": initial_backoff,
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE", "DEADLINE_EXCEEDED"],
                },
            }
        ]
    }
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(cfg)),
    ]


class RobotClient:
    """Round trips through a PolicyServer. `roundtrip_ns(obs)` blocks until the chunk for
    this observation has arrived (received and unpickled by the receiver thread)."""

    def __init__(self, port: int):
        E = MSG["Empty"]
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=channel_options())
        call = lambda kind, name, req, resp: getattr(self.channel, kind)(  # noqa: E731
            f"/{SERVICE}/{name}",
            request_serializer=req.SerializeToString,
            response_deserializer=resp.FromString,
        )
        self.ready = call("unary_unary", "Ready", E, E)
        self.instructions = call("unary_unary", "SendPolicyInstructions", MSG["PolicySetup"], E)
        self.send_observations = call("stream_unary", "SendObservations", MSG["Observation"], E)
        self.get_actions = call("unary_unary", "GetActions", E, MSG["Actions"])
        self.ready(E(), wait_for_ready=True, timeout=30)
        self.instructions(
            MSG["PolicySetup"](
                data=pickle.dumps({"policy_type": "act", "actions_per_chunk": 4, "device": "cpu"})
            )
        )
        self.arrived: queue.Queue = queue.Queue()
        self.running = True
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        while self.running:
            try:
                reply = self.get_actions(MSG["Empty"]())
            except (grpc.RpcError, ValueError):  # ValueError: channel closed by close()
                continue
            if len(reply.data) == 0:
                continue
            actions = pickle.loads(reply.data)
            self.arrived.put((actions[0].timestep, time.monotonic_ns()))

    def _chunks(self, data: bytes):
        for start in range(0, len(data), CHUNK_SIZE):
            state = END if start + CHUNK_SIZE >= len(data) else (BEGIN if start == 0 else MIDDLE)
            yield MSG["Observation"](transfer_state=state, data=data[start : start + CHUNK_SIZE])

    def roundtrip_ns(self, step: int, observation: dict, timeout_s: float = 10.0) -> int:
        t0 = time.monotonic_ns()
        obs = TimedObservation(time.time(), step, observation, must_go=True)
        self.send_observations(self._chunks(pickle.dumps(obs)))
        while True:
            got, t1 = self.arrived.get(timeout=timeout_s)
            if got == step:
                return t1 - t0

    def close(self) -> None:
        self.running = False
        self.channel.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="LeRobot-protocol policy server (peer baseline)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--inference-latency", type=float, default=0.0)
    a = ap.parse_args()
    from peers import lerobot_grpc  # pickled classes must live in the module, not __main__

    server = lerobot_grpc.serve(a.port, inference_latency=a.inference_latency)
    server.wait_for_termination(timeout=900)  # bounded even if the parent never kills it
