"""The one retry policy of the scheduler clients (tinker_client.connection): which codes are
tried again, how often, and the backoff between tries."""

from __future__ import annotations

import grpc
import pytest

from tinker_client.connection import RETRY_CODES, UNREACHABLE, backoff_s, call_with_retry


def test_the_backoff_doubles_from_a_fifth_of_a_second_up_to_five():
    assert [backoff_s(n) for n in range(1, 9)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


def test_an_unreachable_scheduler_is_tried_the_given_number_of_times_then_its_error_raised():
    channel = grpc.insecure_channel("127.0.0.1:1")  # nothing listens on port 1: UNAVAILABLE
    method = channel.unary_unary("/opentinker.Nothing/Call", request_serializer=lambda b: b, response_deserializer=lambda b: b)
    calls = []

    def call(request, **kwargs):
        calls.append(kwargs)
        return method(request, **kwargs)

    with pytest.raises(grpc.RpcError) as caught:
        call_with_retry(call, b"", attempts=3, codes=UNREACHABLE, timeout=5.0)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert len(calls) == 3 and calls[0] == {"timeout": 5.0}
    channel.close()


class _Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


@pytest.mark.parametrize(("code", "codes", "tries"), [
    (grpc.StatusCode.INVALID_ARGUMENT, RETRY_CODES, 1),  # an answer, not a failure to reach: never again
    (grpc.StatusCode.DEADLINE_EXCEEDED, UNREACHABLE, 1),  # may have done its work: not again
    (grpc.StatusCode.DEADLINE_EXCEEDED, RETRY_CODES, 2),
])
def test_only_the_given_codes_are_tried_again(code, codes, tries):
    calls = []

    def call(request, **kwargs):
        calls.append(request)
        if len(calls) < 2:
            raise _Refused(code)
        return "answer"

    if tries == 1:
        with pytest.raises(grpc.RpcError):
            call_with_retry(call, "req", attempts=5, codes=codes)
    else:
        assert call_with_retry(call, "req", attempts=5, codes=codes) == "answer"
    assert calls == ["req"] * tries
