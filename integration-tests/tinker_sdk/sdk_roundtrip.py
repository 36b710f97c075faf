"""Run in a separate environment with only the registry's ``tinker`` (and tinker-cookbook): the
SDK's train, sample, save and restore calls against ``$TINKER_BASE_URL``, unmodified.

Usage: python sdk_roundtrip.py BASE_MODEL. Prints one JSON line of what it saw (the test checks it).
"""

from __future__ import annotations

import json
import sys

import tinker
from tinker import types


def main(base_model: str) -> None:
    service = tinker.ServiceClient()  # TINKER_BASE_URL and TINKER_API_KEY from the environment
    training = service.create_lora_training_client(base_model=base_model, rank=4, seed=0).result()
    tokenizer = training.get_tokenizer()
    tokens = tokenizer.encode("2 + 3 = 5", add_special_tokens=False)
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})

    losses = []
    for _ in range(3):
        out = training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        losses.append(out.metrics["loss:sum"])

    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokens[:3])
    result = sampler.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=4)).result()
    samples = [list(s.tokens) for s in result.sequences]

    state = training.save_state("after-3").result().path
    restored = service.create_training_client_from_state_with_optimizer(state).result()
    # the same weights: the restored model's loss is the original's
    before = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    after = restored.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    # and the optimizer state came along: one more identical step on each stays identical
    for client in (training, restored):
        client.forward_backward([datum], "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    stepped = [c.forward([datum], "cross_entropy").result().metrics["loss:sum"] for c in (training, restored)]
    print(json.dumps({"losses": losses, "samples": samples, "state": state, "model_id": training.model_id,
                      "restored_model_id": restored.model_id, "loss_before": before, "loss_restored": after,
                      "loss_stepped": stepped, "tinker": tinker.__version__,
                      "tinker_file": tinker.__file__}))


if __name__ == "__main__":
    main(sys.argv[1])
