#!/usr/bin/env bash
# Install the third-party libraries that `lossproof check --target trl|verl|openrlhf|liger|transformers|megatron|torchtitan|olmo|optax|tunix`
# checks, at the pinned versions, on CPU, next to an installed torch 2.13.0 (CPU build) and lossproof.
#
#   scripts/install-peers.sh            # uses the `python3` on PATH (or $PYTHON)
#
# TRL installs normally (its dependencies are resolvable next to torch 2.13). verl, OpenRLHF and
# Liger-Kernel are installed with --no-deps: their declared dependencies include GPU-only or
# cluster packages (vLLM, DeepSpeed, flash-attn, Ray, ...) that the loss code never calls; the
# adapters load the loss modules without them. The few runtime imports the loss modules do need
# are listed explicitly below.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
pip() { "$PYTHON" -m pip --disable-pip-version-check "$@"; }

# Refuse to replace the torch build: every peer must run on the torch already installed.
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.') else 'torch 2.13 must be installed first')"

pip install --quiet "trl==1.16.0"                                   # brings transformers, accelerate, datasets
# --target transformers is pinned to the release trl 1.16.0 resolves to next to torch 2.13 (install it explicitly
# so that a later resolver change cannot move it).
pip install --quiet "transformers==5.25.0"
pip install --quiet --no-deps "verl==0.9.1" "openrlhf==0.11.2" "liger-kernel==0.8.5"
# Runtime imports of verl/trainer/ppo/core_algos.py and verl/workers/config (Ray is not needed).
pip install --quiet "omegaconf==2.3.1" "codetiming==1.4.0"
# verl pins tensordict<=0.10.0; its own runtime imports, without letting it downgrade `packaging`.
pip install --quiet --no-deps "tensordict==0.10.0" "pyvers==0.1.0" "cloudpickle" "orjson"
# Pillow: verl/utils/dataset/__init__.py imports rl_dataset.py (`from PIL import Image`), which the loss code
# reaches through verl/workers/utils/losses.py (sft_loss) and the distillation losses.
pip install --quiet "pillow==13.0.0"

# Pretraining stacks, --no-deps: their loss modules are plain torch, their declared dependencies (Transformer
# Engine, datasets, wandb, tyro, cached-path, ...) are for training runs. megatron-core 0.16.1 and ai2-olmo-core
# 3.0.0 declare Python >= 3.10 and torchtitan 0.3.0 >= 3.11, so no --ignore-requires-python is needed on 3.11. spmd_types (the version torchtitan
# pins) is a runtime import of torchtitan/components/loss.py.
pip install --quiet --no-deps "megatron-core==0.16.1" "torchtitan==0.3.0" "spmd_types==0.2.3" "ai2-olmo-core==3.0.0"
# JAX peers (--target optax|tunix), CPU wheels; JAX stays out of the core install. Tunix is installed with
# --no-deps: its declared dependencies are its whole trainer stack (grain, orbax, sentencepiece, metrax, ...), and
# the adapter loads its loss modules with lossproof.import_bare, with placeholders for metrax, sentencepiece and
# jaxtyping, which those modules import but never call. What they do call: jax, optax and flax (nnx).
pip install --quiet "jax[cpu]==0.10.2" "optax==0.2.8" "flax==0.12.8"
pip install --quiet --no-deps "google-tunix==0.1.7"

"$PYTHON" - <<'PY'
import torch
from lossproof.conformance.targets import load
for name in ("trl", "verl", "openrlhf", "liger", "transformers", "megatron", "torchtitan", "olmo", "optax", "tunix"):
    t = load(name)
    print(f"{name} {t.version}: {len(t.objectives)} objectives (torch {torch.__version__})")
PY
