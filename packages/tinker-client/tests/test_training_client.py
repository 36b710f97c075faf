"""The TrainingService client: data helpers and limits, no server (the end-to-end tests against a
real scheduler are in integration-tests/test_training_client_e2e.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinker_client.training import Datum, ServiceClient

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_training_client_does_not_import_torch():
    code = "import sys, tinker_client.training; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_datum_from_sequence_aligns_weights_advantages_and_logprobs():
    d = Datum.from_sequence(np.array([1, 5, 6, 7, 8]), prompt_len=3, advantage=0.5, sampling_logprobs=[-1.0, -2.0])
    p = d.to_proto()
    assert list(p.tokens) == [1, 5, 6, 7] and list(p.target_tokens) == [5, 6, 7, 8]
    assert list(p.loss_weights) == [0, 0, 1, 1] and list(p.advantages) == [0, 0, 0.5, 0.5]
    assert list(p.sampling_logprobs) == [0, 0, -1.0, -2.0]
    with pytest.raises(ValueError, match="sampling_logprobs has 1 entries for 2"):
        Datum.from_sequence([1, 5, 6, 7, 8], prompt_len=3, sampling_logprobs=[-1.0])
    with pytest.raises(ValueError, match="loss_weights: has 2 entries for 3 tokens"):
        Datum(tokens=[1, 2, 3], target_tokens=[2, 3, 4], loss_weights=[1, 1]).to_proto()


def test_an_oversized_request_fails_before_sending_and_names_the_limit():
    with ServiceClient("127.0.0.1:1", max_message_bytes=1000, retries=0) as service:
        from tinker_core.proto import training_pb2

        big = training_pb2.ForwardBackwardRequest(data=[Datum(list(range(500)), list(range(500))).to_proto()])
        with pytest.raises(ValueError, match="max_message_bytes=1000; split the data"):
            service.call("ForwardBackward", big)


def test_model_info_carries_the_context_length_and_zero_when_the_server_does_not_send_it():
    from tinker_client.training import ModelInfo
    from tinker_core.proto import training_pb2

    info = ModelInfo.from_proto(training_pb2.ModelInfo(base_model="tiny", lora_rank=4, context_length=1024))
    assert (info.base_model, info.lora_rank, info.context_length) == ("tiny", 4, 1024)
    assert ModelInfo.from_proto(training_pb2.ModelInfo(base_model="tiny")).context_length == 0  # an older server
