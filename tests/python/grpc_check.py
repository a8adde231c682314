#!/usr/bin/env python3
"""gRPC's own Python clients (grpcio-health-checking, grpcio-reflection)
against a specd process, as grpc_health_probe and grpcurl would use it.

    grpc_check.py reflect ADDRESS SERVICE[,SERVICE...]
        Lists the services by reflection: exactly the given ones plus
        reflection (and health). For every method of every listed service, resolves
        its request and response types from the reflected descriptors;
        calls each service's read-only method (Info, Health, Stats, Check)
        with an empty request built from them, and prints the answer's fields.
    grpc_check.py health ADDRESS SERVICE STATUS [TIMEOUT_S]
        Polls grpc.health.v1.Health/Check(SERVICE) until it answers STATUS
        (SERVING, NOT_SERVING, ...) or the time runs out (exit 1).
"""
import sys
import time

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

HEALTH = "grpc.health.v1.Health"
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"
READ_ONLY = {"Info", "Health", "Stats"}


def reflect(address, want):
    channel = grpc.insecure_channel(address)
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    expected = set(want) | {REFLECTION}
    # Health is served by every process; gRPC C++ lists it by reflection or
    # not depending on its version, and newer ones add reflection v1.
    if services - {HEALTH, "grpc.reflection.v1.ServerReflection"} != expected:
        print(f"FAIL: services {sorted(services)}, expected {sorted(expected)}")
        return 1
    pool = descriptor_pool.DescriptorPool(db)
    calls = 0
    for name in sorted(want):
        svc = pool.FindServiceByName(name)
        methods = [m.name for m in svc.methods]
        print(f"{name}: {' '.join(methods)}")
        for m in svc.methods:
            req_cls = message_factory.GetMessageClass(m.input_type)
            resp_cls = message_factory.GetMessageClass(m.output_type)
            if m.name not in READ_ONLY or m.server_streaming or m.client_streaming:
                continue
            rpc = channel.unary_unary(f"/{name}/{m.name}", request_serializer=req_cls.SerializeToString,
                                      response_deserializer=resp_cls.FromString)
            resp = rpc(req_cls(), timeout=30)
            fields = [f.name for f, _ in resp.ListFields()]
            print(f"  {m.name} -> {m.output_type.full_name} ({len(fields)} fields set)")
            if not fields:
                print(f"FAIL: {name}/{m.name} answered an empty message")
                return 1
            calls += 1
    # The health service answers too, as grpc_health_probe asks it.
    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status
    print(f"{HEALTH}/Check('') -> {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")
    print(f"reflection ok: {len(services)} services, {calls} calls")
    return 0


def health(address, service, want, timeout_s):
    channel = grpc.insecure_channel(address)
    stub = health_pb2_grpc.HealthStub(channel)
    end = time.time() + timeout_s
    last = None
    while time.time() < end:
        try:
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(
                stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status)
        except grpc.RpcError as e:
            last = f"error {e.code().name}"
        if last == want:
            print(f"health {service or '(server)'}: {last}")
            return 0
        time.sleep(0.1)
    print(f"FAIL: health {service or '(server)'} is {last}, waited {timeout_s} s for {want}")
    return 1


def main():
    if sys.argv[1] == "reflect":
        return reflect(sys.argv[2], sys.argv[3].split(","))
    if sys.argv[1] == "health":
        return health(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]) if len(sys.argv) > 5 else 30)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
