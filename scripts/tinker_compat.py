"""The Tinker SDK compatibility report, generated: every public method of the installed ``tinker``
SDK's ``ServiceClient``, ``TrainingClient``, ``SamplingClient`` and ``RestClient`` (found with
``inspect``, the ``*_async`` twins included) called against a live gateway with minimal valid
arguments, and classified by what happened:

- ``supported``: the call returned (its future resolved);
- ``refused``: the gateway served the route and answered an error (its type and first line);
- ``refused by the SDK``: the SDK raised before sending any request (a client-side check);
- ``not served``: the route is not the gateway's (404 ``Not Found`` / 405 / 501);
- ``client only``: the method returned without any request (it runs inside the SDK);
- ``not exercised``: the script has no argument builder for the method (kept small, listed).

The route column is what the SDK sent while the call ran (``session_heartbeat`` and
``retrieve_future`` polls left out: they belong to every call).

Usage::

    uv run --locked python scripts/tinker_compat.py            # write the report
    uv run --locked python scripts/tinker_compat.py --check    # fail if the committed one differs
    python scripts/tinker_compat.py --base-url URL --api-key KEY --base-model M --out-dir DIR

Without ``--base-url`` it starts ``opentinker scheduler start --tinker-port`` on loopback (the
workspace's scheduler, the ``tiny`` preset) and a tenant; with it, only ``tinker`` is needed, so
it runs in any environment that has the SDK (for example a newer SDK release). It writes
``docs/reference/tinker-compat.md`` and ``tinker-compat.json`` and the count line between the
``tinker-compat`` markers of ``README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference" / "tinker-compat.md"
JSON_OUT = ROOT / "docs" / "reference" / "tinker-compat.json"
README = ROOT / "README.md"
MARK_BEGIN, MARK_END = "<!-- tinker-compat:begin -->", "<!-- tinker-compat:end -->"
CLASSES = ("ServiceClient", "TrainingClient", "SamplingClient", "RestClient")
IGNORED_ROUTES = ("session_heartbeat", "retrieve_future", "telemetry")
CALL_TIMEOUT_S = 120.0

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# --- the live gateway -----------------------------------------------------------------------------


@contextlib.contextmanager
def start_gateway(tmp: Path) -> Iterator[tuple[str, str]]:
    """``opentinker scheduler start --tinker-port 0`` on loopback with one tenant: (url, api key)."""
    from tinker_scheduler.testing import running_scheduler

    with contextlib.ExitStack() as stack:
        try:
            process = stack.enter_context(running_scheduler(tmp, tenant="compat", tinker=True))
        except AssertionError as e:  # it did not start: the message holds its log
            raise SystemExit(str(e)) from None
        yield process.tinker_url, "tml-" + process.api_key


# --- the routes each call sends --------------------------------------------------------------------


class RouteLog:
    """Records ``METHOD path`` of every request the SDK sends (httpx, sync and async) while on."""

    def __init__(self) -> None:
        self.on, self.seen = False, []
        import httpx

        for cls in (httpx.Client, httpx.AsyncClient):
            original = cls.send
            if inspect.iscoroutinefunction(original):
                async def send(client, request, *a, _orig=original, **kw):  # noqa: ANN001
                    self.record(request)
                    return await _orig(client, request, *a, **kw)
            else:
                def send(client, request, *a, _orig=original, **kw):  # noqa: ANN001
                    self.record(request)
                    return _orig(client, request, *a, **kw)
            cls.send = send

    def record(self, request: Any) -> None:
        path = request.url.path.removeprefix("/api").removeprefix("/v1/").strip("/")
        if self.on and not any(ignored in path for ignored in IGNORED_ROUTES):
            route = f"{request.method} {generic_path(path)}"
            if route not in self.seen:
                self.seen.append(route)


def generic_path(path: str) -> str:
    """A request path with its ids replaced by placeholders, so the report is stable across runs."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if i and parts[i - 1] in ("training_runs", "sessions", "samplers") and part != "search":
            parts[i] = "{id}"
        elif i and parts[i - 1] in ("weights", "sampler_weights") and parts[0] == "training_runs":
            parts[i] = "{name}"
    return "/".join(parts)


# --- minimal arguments per method ------------------------------------------------------------------


class Context:
    """What the builders share: one session, a trained model, its checkpoint and its sampler."""

    def __init__(self, tinker: Any, url: str, key: str, base_model: str) -> None:
        from tinker import types

        self.tinker, self.types, self.url, self.key, self.base_model = tinker, types, url, key, base_model
        self.service = tinker.ServiceClient(base_url=url, api_key=key)
        self.training = self.service.create_lora_training_client(base_model=base_model, rank=4, seed=0).result()
        self.datum = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                                 loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]})
        self.state_path = self.training.save_state("compat-state").result().path
        self.sampler_path = self.training.save_weights_for_sampler("compat-sampler").result().path
        self.sampler = self.service.create_sampling_client(model_path=self.sampler_path).result()
        self.rest = self.service.create_rest_client()
        self.model_id = self.training.model_id
        self.session_id = self.service.holder.get_session_id()
        self.fresh = 0

    def fresh_state(self) -> str:
        """A new checkpoint of its own (for the calls that delete one)."""
        self.fresh += 1
        return self.training.save_state(f"compat-delete-{self.fresh}").result().path

    def external(self) -> str:
        """External weights of its own (``save_weights_external``), for the calls that sign their URLs."""
        return self.training.save_weights_external("compat-urls").result().path

    def new_session(self) -> Any:
        """A ServiceClient of its own with its session created (for ``close``)."""
        service = self.tinker.ServiceClient(base_url=self.url, api_key=self.key)
        service.holder.get_session_id()
        return service

    def with_gradients(self) -> Any:
        """The training client after a ``forward_backward`` (so ``optim_step`` has gradients to apply)."""
        self.training.forward_backward([self.datum], "cross_entropy").result()
        return self.training

    def prompt(self) -> Any:
        return self.types.ModelInput.from_ints([1, 2, 3])


def custom_loss(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
    """The negative sum of the target logprobs (a client-side loss for ``forward_backward_custom``)."""
    loss = -sum(lp.sum() for lp in logprobs)
    return loss, {"nll": float(loss.detach())}


def per_datum_loss(logprobs: Any, weights: Any) -> tuple[Any, dict[str, float]]:
    """A server-side custom loss as ``create_custom_loss`` takes it: the weighted negative logprob."""
    return -(logprobs * weights).sum(), {}


# Each builder returns (the object to call the method on, args, kwargs); setup runs in the builder,
# outside the route log. Keys are method names without ``_async`` (the twin takes the same arguments).
Builder = Callable[[Context], tuple[Any, tuple, dict]]
BUILDERS: dict[str, dict[str, Builder]] = {
    "ServiceClient": {
        "close": lambda c: (c.new_session(), ("success",), {}),
        "copy_weights": lambda c: (c.service, (c.state_path,), {}),
        "create_custom_loss": lambda c: (c.service, (per_datum_loss, {"logprobs": 1, "weights": 1}), {}),
        "create_lora_training_client": lambda c: (c.service, (c.base_model,), {"rank": 4, "seed": 0}),
        "create_rest_client": lambda c: (c.service, (), {}),
        "create_sampling_client": lambda c: (c.service, (), {"model_path": c.sampler_path}),
        "create_training_client_from_state": lambda c: (c.service, (c.state_path,), {}),
        "create_training_client_from_state_with_optimizer": lambda c: (c.service, (c.state_path,), {}),
        "get_console_url": lambda c: (c.service, (), {}),
        "get_server_capabilities": lambda c: (c.service, (), {}),
        "get_telemetry": lambda c: (c.service, (), {}),
    },
    "TrainingClient": {
        "create_sampling_client": lambda c: (c.training, (c.sampler_path,), {}),
        "forward": lambda c: (c.training, ([c.datum], "cross_entropy"), {}),
        "forward_backward": lambda c: (c.training, ([c.datum], "cross_entropy"), {}),
        "forward_backward_custom": lambda c: (c.training, ([c.datum], custom_loss), {}),
        "get_console_url": lambda c: (c.training, (), {}),
        "get_info": lambda c: (c.training, (), {}),
        "get_telemetry": lambda c: (c.training, (), {}),
        "get_tokenizer": lambda c: (c.training, (), {}),
        "load_state": lambda c: (c.training, (c.state_path,), {}),
        "load_state_with_optimizer": lambda c: (c.training, (c.state_path,), {}),
        "optim_step": lambda c: (c.with_gradients(), (c.types.AdamParams(learning_rate=1e-4),), {}),
        "save_state": lambda c: (c.training, ("compat-save",), {"overwrite": True}),
        "save_weights_and_get_sampling_client": lambda c: (c.training, (), {}),
        "save_weights_external": lambda c: (c.training, ("compat-external",), {}),
        "save_weights_for_sampler": lambda c: (c.training, ("compat-sampler-2",), {}),
    },
    "SamplingClient": {
        "compute_logprobs": lambda c: (c.sampler, (c.prompt(),), {}),
        "create": lambda c: (c.tinker.SamplingClient, (c.service.holder,), {"model_path": c.sampler_path}),
        "from_sampler_handle": lambda c: (c.tinker.SamplingClient, (c.sampler.get_sampler_handle(),),
                                          {"api_key": c.key}),
        "get_base_model": lambda c: (c.sampler, (), {}),
        "get_sampler_handle": lambda c: (c.sampler, (), {}),
        "get_telemetry": lambda c: (c.sampler, (), {}),
        "get_tokenizer": lambda c: (c.sampler, (), {}),
        "on_queue_state_change": lambda c: (c.sampler, (queue_state_active(), None), {}),
        "sample": lambda c: (c.sampler, (c.prompt(), 1, c.types.SamplingParams(max_tokens=2)), {}),
    },
    "RestClient": {
        "assign_session_project": lambda c: (c.rest, (c.session_id, "compat-project"), {}),
        "copy_weights": lambda c: (c.rest, (c.state_path,), {"destination_project_id": "compat-project"}),
        "delete_checkpoint": lambda c: (c.rest, (c.model_id, c.fresh_state().split(c.model_id + "/", 1)[1]), {}),
        "delete_checkpoint_from_tinker_path": lambda c: (c.rest, (c.fresh_state(),), {}),
        "export_session_trace": lambda c: (c.rest, (c.session_id,), {}),
        "get_audit_log": lambda c: (c.rest, (), {}),
        "get_billing_usage": lambda c: (c.rest, ("2026-01-01", "2026-01-02"), {}),
        "get_current_checkpoint_storage_usage": lambda c: (c.rest, (), {}),
        "get_external_weights_urls": lambda c: (c.rest, (c.external(),), {}),
        "get_sampler": lambda c: (c.rest, (c.sampler._sampling_session_id,), {}),
        "get_server_capabilities": lambda c: (c.rest, (), {}),
        "get_session": lambda c: (c.rest, (c.session_id,), {}),
        "get_telemetry": lambda c: (c.rest, (), {}),
        "get_training_run": lambda c: (c.rest, (c.model_id,), {}),
        "get_training_run_by_tinker_path": lambda c: (c.rest, (c.state_path,), {}),
        "get_weights_info_by_tinker_path": lambda c: (c.rest, (c.state_path,), {}),
        "list_checkpoints": lambda c: (c.rest, (c.model_id,), {}),
        "list_sessions": lambda c: (c.rest, (), {}),
        "list_training_runs": lambda c: (c.rest, (), {}),
        "list_user_checkpoints": lambda c: (c.rest, (), {}),
        "publish_checkpoint_from_tinker_path": lambda c: (c.rest, (c.state_path,), {}),
        "search_sessions": lambda c: (c.rest, (c.types.SessionSearchRequest(),), {}),
        "set_checkpoint_ttl_from_tinker_path": lambda c: (c.rest, (c.state_path, 3600), {}),
        "unpublish_checkpoint_from_tinker_path": lambda c: (c.rest, (c.state_path,), {}),
        "whoami": lambda c: (c.rest, (), {}),
    },
}


def queue_state_active() -> Any:
    from tinker.lib.api_future_impl import QueueState

    return QueueState.ACTIVE


# --- calling and classifying -----------------------------------------------------------------------


def public_methods(cls: type) -> list[str]:
    """The class's public methods (properties and attributes left out), in name order."""
    return [name for name, _ in inspect.getmembers(cls) if not name.startswith("_")
            and not isinstance(inspect.getattr_static(cls, name), property) and callable(getattr(cls, name))]


def call(method: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> Any:
    """Call an SDK method to its end: a future's result, a coroutine awaited (and its future's)."""
    if name.endswith("_async") or inspect.iscoroutinefunction(inspect.unwrap(method)):
        async def run() -> Any:
            value = method(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            if hasattr(value, "result_async"):
                value = await value.result_async()
            return value

        return asyncio.run(asyncio.wait_for(run(), CALL_TIMEOUT_S))
    value = method(*args, **kwargs)
    if hasattr(value, "result") and callable(value.result) and not isinstance(value, type):
        value = value.result(timeout=CALL_TIMEOUT_S)
    return value


def stable(text: str, ctx: Context) -> str:
    """An error's first line with this run's ids replaced, so the report is the same every run."""
    line = (text.strip().splitlines() or [""])[0]
    for value, name in ((ctx.model_id, "{model_id}"), (ctx.session_id, "{session_id}"), (ctx.url, "{url}")):
        line = line.replace(value, name)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "{uuid}", line)
    line = re.sub(r"compat-delete-\d+", "{name}", line)
    line = re.sub(r"\b[a-z]{1,4}-[0-9a-f]{8,}\b", "{id}", line)
    return line[:160].replace("|", "\\|")


def classify(error: BaseException, ctx: Context) -> tuple[str, str]:
    """(status, detail) of a call that raised."""
    status_code = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    detail_text = body.get("detail") if isinstance(body, dict) else None
    if status_code in (404, 405, 501) and detail_text in ("Not Found", "Method Not Allowed", "Not Implemented"):
        return "not served", f"{status_code} `{type(error).__name__}`"
    what = f"{status_code} " if status_code else ""
    return "refused", f"{what}`{type(error).__name__}`: {stable(str(error), ctx)}"


def refused_by_sdk(row: dict[str, str]) -> None:
    """A refusal that sent no request came from the SDK itself, not the gateway: say so."""
    if row["status"] == "refused" and not row["route"]:
        row["status"] = "refused by the SDK"


def exercise(ctx: Context, log: RouteLog) -> list[dict[str, str]]:
    """Every public method of the four classes, called once: one row each."""
    rows = []
    for class_name in CLASSES:
        cls = getattr(ctx.tinker, class_name)
        for name in public_methods(cls):
            builder = BUILDERS[class_name].get(name.removesuffix("_async"))
            row = {"class": class_name, "method": name, "route": "", "status": "not exercised", "detail": ""}
            rows.append(row)
            if builder is None:
                row["detail"] = "no argument builder in scripts/tinker_compat.py"
                continue
            try:
                target, args, kwargs = builder(ctx)
            except Exception as e:  # noqa: BLE001 - the set-up's failure is the row's result
                row["detail"] = f"set-up failed: `{type(e).__name__}`: {stable(str(e), ctx)}"
                continue
            log.seen, log.on = [], True
            try:
                call(getattr(target, name), name, args, kwargs)
                row["status"] = "supported"
            except Exception as e:  # noqa: BLE001 - what the SDK raises is what we report
                row["status"], row["detail"] = classify(e, ctx)
            finally:
                log.on = False
            row["route"] = ", ".join(log.seen)
            if not log.seen and row["status"] == "supported":
                row["status"] = "client only"
            refused_by_sdk(row)
            print(f"{class_name}.{name}: {row['status']} {row['route']} {row['detail']}", file=sys.stderr)
    return rows


# --- the report ------------------------------------------------------------------------------------


def summary(rows: list[dict[str, str]]) -> dict[str, int]:
    counts = {s: sum(r["status"] == s for r in rows)
              for s in ("supported", "refused", "refused by the SDK", "not served", "client only", "not exercised")}
    counts["gateway methods"] = len(rows) - counts["client only"]
    return counts


def count_line(counts: dict[str, int], version: str) -> str:
    return (f"**{counts['supported']} of {counts['gateway methods']}** methods of the `tinker` SDK {version} "
            f"that call the server are supported by the gateway ({counts['client only']} more run on the client "
            f"only; [the generated report](docs/reference/tinker-compat.md)).")


def render(rows: list[dict[str, str]], version: str) -> str:
    counts = summary(rows)
    out = ["# Tinker SDK compatibility", "",
           "<!-- generated by scripts/tinker_compat.py: do not edit; regenerate with "
           "`uv run --locked python scripts/tinker_compat.py` -->", "",
           f"`tinker` SDK {version} against `opentinker scheduler start --tinker-port` (the `tiny` preset): "
           f"**{counts['supported']} of {counts['gateway methods']} methods that call the server are supported**; "
           f"{counts['refused']} refused by the gateway, {counts['refused by the SDK']} refused by the SDK "
           f"before any request, {counts['not served']} not served, {counts['not exercised']} not "
           f"exercised, and {counts['client only']} run on the client only.", "",
           "Every public method of `ServiceClient`, `TrainingClient`, `SamplingClient` and `RestClient` "
           "(their `*_async` twins included) is called once with minimal valid arguments. **supported**: "
           "it returned; **refused**: the gateway serves the route and answered this error; **refused by the "
           "SDK**: the SDK raised before sending a request (a client-side check); **not served**: "
           "the route is not the gateway's (404 `Not Found`, 405, 501); **client only**: it returned without "
           "a request; **not exercised**: the script has no arguments for it. The route is what the SDK sent "
           "during the call (`session_heartbeat` and `retrieve_future` polls left out). "
           "`--check` fails when this page differs from a fresh run, so the count moves only with code.", ""]
    for class_name in CLASSES:
        out += [f"## {class_name}", "", "| method | route | result | detail |", "| --- | --- | --- | --- |"]
        for r in (r for r in rows if r["class"] == class_name):
            route = f"`{r['route']}`" if r["route"] else ""
            out.append(f"| `{r['method']}` | {route} | {r['status']} | {r['detail']} |")
        out.append("")
    return "\n".join(out)


def readme_with(readme: str, line: str) -> str:
    """README's text with the count line between the markers (the markers must be there)."""
    begin, end = readme.find(MARK_BEGIN), readme.find(MARK_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"README.md has no {MARK_BEGIN} ... {MARK_END} markers: add them where the count goes")
    return readme[:begin + len(MARK_BEGIN)] + "\n" + line + "\n" + readme[end:]


def generate(args: argparse.Namespace) -> tuple[str, str, str]:
    """Run the calls: (the page, the JSON, the README count line)."""
    import tinker

    log = RouteLog()
    warnings.simplefilter("ignore")  # the SDK's deprecation notices: the report is about the server
    with contextlib.ExitStack() as stack:
        if args.base_url:
            url, key = args.base_url, args.api_key or os.environ.get("TINKER_API_KEY", "")
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tinker-compat-")))
            url, key = stack.enter_context(start_gateway(tmp))
        ctx = Context(tinker, url, key, args.base_model)
        rows = exercise(ctx, log)
        with contextlib.suppress(Exception):
            ctx.service.close("success").result(timeout=30)
    version = tinker.__version__
    counts = summary(rows)
    data = json.dumps({"sdk": "tinker", "version": version, "counts": counts, "methods": rows}, indent=1) + "\n"
    return render(rows, version) + "\n", data, count_line(counts, version)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--check", action="store_true", help="regenerate and fail (exit 1) if the committed files differ")
    p.add_argument("--base-url", help="an already running gateway (default: start a scheduler on loopback)")
    p.add_argument("--api-key", help="its tenant key, tml-... (default: $TINKER_API_KEY)")
    p.add_argument("--base-model", default="tiny", help="the base model to train and sample (default: tiny)")
    p.add_argument("--out-dir", type=Path, help="write the page and JSON here instead of docs/reference/ "
                                                "(and leave README.md alone)")
    args = p.parse_args(argv)
    page, data, line = generate(args)
    if args.check:
        stale = [str(path.relative_to(ROOT)) for path, text in ((DOC, page), (JSON_OUT, data))
                 if not path.exists() or path.read_text() != text]
        readme = README.read_text()
        if readme_with(readme, line) != readme:
            stale.append("README.md")
        if stale:
            print(f"out of date: {', '.join(stale)}; regenerate with "
                  "`uv run --locked python scripts/tinker_compat.py` and commit", file=sys.stderr)
            return 1
        print("the Tinker compatibility report is up to date", file=sys.stderr)
        return 0
    out_dir = args.out_dir or DOC.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / DOC.name).write_text(page)
    (out_dir / JSON_OUT.name).write_text(data)
    if args.out_dir is None:
        README.write_text(readme_with(README.read_text(), line))
    print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
