"""What runs a program: the protocol hooks (``_protocol``) and ``Rank``, the rank host
(``_host``), the coordinator, a run's settings (``_config``), what it asks of a transport
(``_fabric``), checkpoint sets, chaos plans and traces. Imports the facade, the engine and
``ftactors.base``; never a transport, a protocol or a tool. The layers above use the
names exported here, never a ``_module`` of this folder (``tests/test_layers.py``)."""
from ._chaos import Chaos, KILL_METHODS, Kill, Partition, RANK_MOMENTS, SPARE_MOMENTS
from ._checkpoints import (part_name, position_index, prune_sets, seal_set, set_prefix,
                           store_part)
from ._config import RunConfig
from ._coordinator import Coordinator, RunResult
from ._deadlock import BACKGROUND, background
from ._deaths import NewFailure, RankDied
from ._escalation import LevelExhausted, LowerLevel
from ._fabric import Fabric
from ._host import Killed, RankHost, RankSpec
from . import _notices as notices  # (a namespace: notices.at_start, notices.after_run)
from ._notices import describe, kill_text
from ._options import (CORE_OPTIONS, INTERVAL, NONE, OWN_ROUNDS, Option, STATE,
                       add_option_flags, core_default, declared_values, option_values,
                       options_table, options_text, with_role)
from ._program_code import code_objects, wildcard_receives
from ._progress import Progress
from ._protocol import (CONSISTENCY, LEVEL, MOVED, Protocol, SPARES, parts_lead,
                        protocol_classes, stack_refusal, working_stacks)
from ._rank import Rank, check_rank_class
from ._rank_context import LinkContext, RankContext
from ._recovery_context import RecoveryContext
from ._stale_locals import stale_key, stale_text
from ._trace import plot_trace, read_traffic, write_trace
from ._unsaved_state import digest

__all__ = [
    "BACKGROUND", "CONSISTENCY", "CORE_OPTIONS", "Chaos", "Coordinator", "Fabric",
    "INTERVAL", "KILL_METHODS", "Kill", "Killed", "LEVEL", "LevelExhausted",
    "LinkContext", "LowerLevel", "MOVED", "NONE", "NewFailure", "OWN_ROUNDS", "Option",
    "Partition", "Progress", "Protocol", "RANK_MOMENTS", "Rank", "RankContext",
    "RankDied", "RankHost", "RankSpec", "RecoveryContext", "RunConfig", "RunResult",
    "SPARES", "SPARE_MOMENTS", "STATE", "add_option_flags", "background",
    "check_rank_class", "code_objects", "core_default", "declared_values", "describe",
    "digest", "kill_text", "notices", "option_values", "options_table", "options_text",
    "part_name", "parts_lead", "plot_trace", "position_index", "protocol_classes",
    "prune_sets", "read_traffic", "seal_set", "set_prefix", "stack_refusal",
    "stale_key", "stale_text", "store_part", "wildcard_receives", "with_role",
    "working_stacks", "write_trace",
]
