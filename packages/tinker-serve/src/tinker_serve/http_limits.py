"""The HTTP limits of every OpenTinker server, moved to :mod:`tinker_core.http_limits` (one copy for
tinker-serve and the torch-free ``opentinker view``); this module keeps the old import path."""

from tinker_core.http_limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_JSON_DEPTH,
    BodyGuard,
    HttpLimits,
    parse_json,
    protocol_class,
    uvicorn_config,
)

__all__ = ["BODY_TIMEOUT_S", "HEADER_TIMEOUT_S", "MAX_JSON_DEPTH", "BodyGuard", "HttpLimits", "parse_json",
           "protocol_class", "uvicorn_config"]
