"""The Python checks: the logic that YAML cannot express, each still declared by a rule file in rules/
(`condition: {type: check, name: ...}`) and registered under that name in logscope.rules.api.CHECKS.

One module per check, named after it, whose docstring names the rule that uses it and what it decides. What several
checks share lives in modules named for what it is about:

- failures: failure kinds and exceptions, how a failure is described, the warning just before it, every rank
  aborted, the fallback stage's ground
- world: whether the process group formed (an exception raised joining it, lines that prove it formed)
- collectives: the torch.distributed call each failing rank was in
- stack_dumps: live processes' stack dumps, one per process, with its rank
- flight_evidence: Flight Recorder dump entries as evidence rows
- rows: reading event rows (a frame's function, a numeric field, a line for a message, how far a rank got)

Importing this package registers every check; the loader imports it. The checks import logscope.rules.api and
each other's shared modules, never the loader or the engine.
"""

from logscope.rules.checks import (  # noqa: F401  (each module registers its check on import)
    accelerate_shapes,
    all_ranks_aborted,
    collective_said_timeout,
    connect_retries_unresolved,
    detail_mismatch,
    different_collective_calls,
    duplicate_device,
    duplicate_gpu,
    duplicate_rank_claims,
    exception_joining_world,
    flight_peer_mismatch,
    flight_recorder_hang,
    flight_recorder_mismatch,
    flight_skipped_sync,
    garbage_object_size,
    generic_failure,
    gpu_unusable_at_sync,
    horovod_stalled,
    lagging_other_collective,
    launcher_failed,
    left_early,
    pair_setting_differs,
    past_the_sync,
    peer_connection_lost,
    received_parameters_misfit,
    root_cause_crash,
    seeds_not_offset,
    signalled_from_outside,
    single_rank,
    skipped_constructor_sync,
    skipped_startup_collectives,
    stall,
    store_lost_after_world_formed,
    store_lost_before_world_formed,
    store_wait_timeout,
    timeout_at_param_sync,
    timeout_dump_signal,
    world_never_formed,
)
