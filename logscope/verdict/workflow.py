"""The debugging workflow the verdicts point into (../shared/reference/workflow.md, in our words)."""

from __future__ import annotations

STEPS: dict[str, str] = {
    "W1": "Prove one GPU first",
    "W2": "Launch through the launcher",
    "W3": "Check the rank count",
    "W4": "skrl + JAX is different",
    "W5": "See every rank",
    "W6": "Launcher problem or communication problem?",
    "W7": "Reproduce small",
    "W8": "One workaround at a time",
    "W9": "Workarounds are per machine",
    "W10": "Multi-node last",
}

DEFAULT_COMMANDS: dict[str, str] = {
    "W1": "python scripts/reinforcement_learning/<framework>/train.py --task <task> --headless  # no launcher, one GPU",
    "W3": "nvidia-smi -L && echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES",
    "W5": "torchrun --nproc_per_node <N> --tee 3 --log_dir logs/ <train.py> ... --distributed",
    "W6": "nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv -l 5",
    "W7": "logscope replay {input} --world-sizes 1,2",
    "W8": "logscope replay {input} --sweep-env",
    "W10": "torchrun --nnodes 2 --node_rank <0|1> --master_addr <host> --master_port 29500 "
    "--nproc_per_node <N> --tee 3 --log_dir logs/ <train.py> ... --distributed",
}

CHECKLIST: dict[str, str] = {
    "V1": "The same command trains on a single GPU.",
    "V2": "Every rank reaches parameter synchronization in the logs — not just rank 0.",
    "V3": "The run reports a training time and exits with status 0.",
    "V4": "Scaling changes throughput; the job is not silently running one rank.",
    "V5": "Where an NCCL workaround was applied, the run (or probe) also fails without it.",
}

# NCCL variables that match a signature (workflow.md table; torch_logs.md §6), for W8 recommendations.
WORKAROUND_FOR = {
    "cuda_illegal_access": "NCCL_SHM_DISABLE=1",
    "nccl_ib_completion_error": "NCCL_IB_DISABLE=1",
    "nccl_no_socket_interface": "NCCL_SOCKET_IFNAME=<interface>",
    "nccl_shm_failure": "NCCL_SHM_DISABLE=1",
}
