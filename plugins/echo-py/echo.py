"""Echo -> Job, in Python: each ``Echo`` custom resource becomes one Job that runs
``echo <message>``. The same plugin as the Rust Echo in ../echo (same name, same Jobs,
same status and events, byte for byte), written with the Python SDK.

The message is ``spec.message``, or a key of a ConfigMap in the Echo's namespace
(``spec.messageFrom.configMapKeyRef``), which Echo declares as a related kind so the host
reconciles the Echo again whenever that ConfigMap changes.

The Job's name carries a hash of what goes into its pod template (the message and the
image): Job templates are immutable, so a changed message -- edited in the Echo or in its
ConfigMap -- yields a new Job and the host prunes the old one.

This module runs natively (pytest) and in the Wasm build; app.py exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capstan_sdk import (
    Conditions,
    Context,
    Event,
    Fatal,
    KindRef,
    Metadata,
    Reconciler,
    Related,
    Response,
    Settings,
    conditions,
    objects,
    setting,
)
from capstan_sdk.kinds import CONFIG_MAP, JOB
from capstan_sdk.names import dns1123_subdomain, rust_debug
from capstan_sdk.reconciler import to_json

VERSION = "0.1.0"
ECHO = KindRef("capstan.dev", "v1alpha1", "Echo", "echoes", namespaced=True)

IMAGE = "busybox:1.37.0"
"""Image the Job runs unless the settings name another; pinned so a reconcile is reproducible."""
BACKOFF_LIMIT = 2
"""Retries of a failed echo before the Job is marked Failed, unless the settings say."""
MESSAGE_SOURCE_MISSING = "MessageSourceMissing"
"""Reason of the Warning event and the Ready condition when the message's ConfigMap or key is missing."""
# Kubernetes caps Job names at 63 characters (they become a Pod label value).
MAX_JOB_NAME = 63

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"


@dataclass
class EchoSettings(Settings):
    """Echo's settings."""

    image: str = setting(IMAGE, "Image of the Job's container; it must provide `echo`.")
    backoff_limit: int | None = setting(
        None, "Retries of a failed echo before the Job is marked Failed (default 2).", format="int32"
    )
    ttl_seconds_after_finished: int | None = setting(
        None, "Delete a finished Job this many seconds after it finished (default: keep it).", format="int32"
    )

    def validate(self) -> None:
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise ValueError(f"image {rust_debug(self.image)} is not an image reference")
        for name, value in (
            ("backoffLimit", self.backoff_limit),
            ("ttlSecondsAfterFinished", self.ttl_seconds_after_finished),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be at least 0, got {value}")


class MessageSourceMissing(Exception):
    """The message's ConfigMap or key does not exist (yet): not the spec's fault."""


class EchoReconciler(Reconciler):
    def metadata(self) -> Metadata:
        return Metadata("echo", VERSION, parent=ECHO).child(JOB).related(CONFIG_MAP).settings(EchoSettings)

    def related(self, echo: dict[str, Any], ctx: Context) -> list[Related]:
        # An invalid name is never asked for (the host would refuse the query): reconcile
        # reports it as the spec's error instead.
        name = objects.dig(echo, "spec", "messageFrom", "configMapKeyRef", "name")
        if isinstance(name, str) and dns1123_subdomain(name) is None:
            return [Related.named(CONFIG_MAP, name)]
        return []

    def reconcile(self, echo: dict[str, Any], ctx: Context) -> Response:
        settings = ctx.settings(EchoSettings)
        try:
            text = message(echo, ctx)
        except MessageSourceMissing as missing:
            return missing_source(echo, ctx, str(missing))
        job = desired_job(echo, text, settings)
        job_name = job["metadata"]["name"]
        observed = next((j for j in ctx.children_of(JOB) if objects.name(j) == job_name), None)
        phase = PENDING if observed is None else phase_of(objects.status(observed))
        described = f"Job {job_name} is {phase}"

        conds = conditions_of(echo, ctx)
        conds.ready(phase == SUCCEEDED, f"Job{phase}", described)
        response = Response().with_child(job).with_status(status(echo, conds, phase, job_name))
        if previous_phase(echo) != phase:
            if phase == FAILED:
                response.with_event(Event.warning("JobFailed", described))
            else:
                response.with_event(Event.normal(f"Job{phase}", described))
        return response


def message(echo: dict[str, Any], ctx: Context) -> str:
    """The message to echo. Raises MessageSourceMissing when its ConfigMap or key is
    missing (which may change without the Echo changing), Fatal for a spec that can
    never work."""
    spec = objects.spec(echo)
    text, source = spec.get("message"), spec.get("messageFrom")
    if text is not None and not isinstance(text, str):
        raise Fatal("parent does not match the plugin's type: spec.message: expected a string")
    if text is not None and source is not None:
        raise Fatal("spec.message and spec.messageFrom are both set: give one")
    if text is not None:
        if not text.strip():
            raise Fatal("spec.message is empty: nothing to echo")
        return text
    if source is None:
        raise Fatal("neither spec.message nor spec.messageFrom is set: nothing to echo")
    ref = objects.dig(source, "configMapKeyRef")
    name, key = objects.dig(ref, "name"), objects.dig(ref, "key")
    if not isinstance(name, str) or not isinstance(key, str):
        raise Fatal(
            "parent does not match the plugin's type: spec.messageFrom.configMapKeyRef needs name and key strings"
        )
    bad = dns1123_subdomain(name)
    if bad:
        raise Fatal(f"spec.messageFrom.configMapKeyRef.name {bad}")
    namespace = objects.namespace(echo) or "default"
    found = next((c for c in ctx.related_of(CONFIG_MAP) if objects.name(c) == name), None)
    if found is None:
        raise MessageSourceMissing(f"ConfigMap {namespace}/{name} not found")
    data = found.get("data") if isinstance(found.get("data"), dict) else {}
    if not isinstance(data.get(key), str):
        raise MessageSourceMissing(f"ConfigMap {namespace}/{name} has no key {rust_debug(key)}")
    return data[key]


def missing_source(echo: dict[str, Any], ctx: Context, why: str) -> Response:
    """No message to echo: no Job (so an old one is pruned), Ready False with the reason,
    and a Warning the first time this reason is reported."""
    before = conditions.find(objects.status(echo).get("conditions"), conditions.READY)
    reported = before is not None and before.reason == MESSAGE_SOURCE_MISSING and before.message == why
    conds = conditions_of(echo, ctx)
    conds.ready(False, MESSAGE_SOURCE_MISSING, why)
    response = Response().with_status(status(echo, conds, PENDING, None))
    if not reported:
        response.with_event(Event.warning(MESSAGE_SOURCE_MISSING, f"{why}: no Job until it exists"))
    return response


def status(echo: dict[str, Any], conds: Conditions, phase: str, job_name: str | None) -> dict[str, Any]:
    """EchoStatus as the Rust Echo serializes it: absent fields left out."""
    out: dict[str, Any] = {}
    if job_name is not None:
        out["jobName"] = job_name
    out["phase"] = phase
    generation = objects.generation(echo)
    if generation is not None:
        out["observedGeneration"] = generation
    if len(conds):
        out["conditions"] = conds.to_list()
    return out


def conditions_of(echo: dict[str, Any], ctx: Context) -> Conditions:
    """The Echo's conditions as last written, to update for this reconcile."""
    return Conditions(objects.status(echo).get("conditions"), objects.generation(echo), ctx.now)


def previous_phase(echo: dict[str, Any]) -> str | None:
    phase = objects.status(echo).get("phase")
    return phase if phase in (PENDING, RUNNING, SUCCEEDED, FAILED) else None


def desired_job(echo: dict[str, Any], text: str, settings: EchoSettings) -> dict[str, Any]:
    """The one Job an Echo wants for ``text``: in the Echo's namespace, named for the
    Echo and what its pod template holds."""
    name = objects.name(echo)
    if name is None:
        raise Fatal("Echo has no metadata.name")
    # The bytes the Rust Echo hashes: {"message": ...} alone for the default image (what
    # the 0.1 Echo hashed, so Jobs keep their names across upgrades). The Job's mutable
    # fields stay out, so changing them updates the Job in place.
    inputs: dict[str, str] = {"message": text}
    if settings.image != IMAGE:
        inputs["image"] = settings.image
    digest = spec_hash(to_json(inputs).encode())
    prefix = name[: MAX_JOB_NAME - len(digest) - 1].rstrip("-.")
    metadata: dict[str, Any] = {"name": f"{prefix}-{digest}"}
    namespace = objects.namespace(echo)
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "capstan", "capstan.dev/plugin": "echo"}
    spec: dict[str, Any] = {
        "backoffLimit": BACKOFF_LIMIT if settings.backoff_limit is None else settings.backoff_limit,
    }
    if settings.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    spec["template"] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "echo", "image": settings.image, "command": ["echo", text]}],
        }
    }
    return {"apiVersion": JOB.api_version, "kind": JOB.kind, "metadata": metadata, "spec": spec}


def phase_of(status: dict[str, Any]) -> str:
    """Phase of an observed Job from its conditions and counters."""
    def holds(type_: str) -> bool:
        return any(
            isinstance(c, dict) and c.get("type") == type_ and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )

    if holds("Complete"):
        return SUCCEEDED
    if holds("Failed"):
        return FAILED
    active = status.get("active")
    if (isinstance(active, int) and active > 0) or status.get("startTime") is not None:
        return RUNNING
    return PENDING


def spec_hash(data: bytes) -> str:
    """8 hex digits of FNV-1a over the serialized inputs, folded as the Rust Echo folds
    them: stable across runs, which Python's seeded hash() is not."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{(h ^ (h >> 32)) & 0xFFFFFFFF:08x}"
