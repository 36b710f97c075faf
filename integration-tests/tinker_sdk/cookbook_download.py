"""Run in a separate environment with only the registry's ``tinker`` and tinker-cookbook: train a
LoRA briefly against ``$TINKER_BASE_URL``, save its state, and download it with the cookbook's own
``tinker_cookbook.weights.download`` (which exports it as age-encrypted external weights, fetches
every file from its signed URL, decrypts it and deletes the export), unmodified.

Usage: python cookbook_download.py BASE_MODEL OUTPUT_DIR. Prints one JSON line of what it saw
(the test loads the files with peft and checks them against ``logprobs``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tinker
from tinker import types
from tinker_cookbook import weights

SEQ = [1, 20, 21, 22, 30, 31, 2]


def main(base_model: str, output_dir: str) -> None:
    service = tinker.ServiceClient()  # TINKER_BASE_URL and TINKER_API_KEY from the environment
    training = service.create_lora_training_client(base_model=base_model, rank=4, seed=0).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                        loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [1.0] * (len(SEQ) - 1)})
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    logprobs = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    state = training.save_state("final").result().path
    weights.download(tinker_path=state, output_dir=output_dir)
    left = [c.checkpoint_type for c in tinker.RestClient().list_user_checkpoints().result().checkpoints]
    print(json.dumps({"state": state, "files": sorted(p.name for p in Path(output_dir).iterdir()),
                      "logprobs": logprobs, "checkpoint_types_left": left, "seq": SEQ}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
