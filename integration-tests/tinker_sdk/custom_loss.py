"""Run in a separate environment with only the registry's ``tinker``: ``forward_backward_custom``
with a loss written here (the SDK computes it on the client, the server runs a weighted
cross-entropy). Usage: python custom_loss.py BASE_MODEL. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import tinker
import torch
from tinker import types


def mean_nll(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """The mean negative log-likelihood of the target tokens (weights ignored)."""
    loss = torch.stack([-lp.mean() for lp in logprobs]).mean()
    return loss, {"mean_nll": float(loss.detach())}


def main(base_model: str) -> None:
    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=base_model, rank=4, seed=0).result()
    tokens = training.get_tokenizer().encode("7 + 8 = 15", add_special_tokens=False)
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})
    nll = []
    for _ in range(3):
        out = training.forward_backward_custom([datum], mean_nll).result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        nll.append(out.metrics["mean_nll"])
    # the server's own cross-entropy (a sum over the tokens) agrees with the custom mean
    ce = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    final = mean_nll([datum], [torch.tensor(training.forward([datum], "cross_entropy").result()
                                             .loss_fn_outputs[0]["logprobs"].tolist())])[1]["mean_nll"]
    print(json.dumps({"nll": nll, "ce_sum": ce, "final_mean_nll": final, "n_targets": len(tokens) - 1}))


if __name__ == "__main__":
    main(sys.argv[1])
