"""The `trialflow` command: validate | convert | render | run | ui | experiments | trials | export
(and the rest, trialflow.cli.definition): its entry point. Each group of subcommands lives in a
module of its own (config_commands, run_commands, store_commands, steer_commands)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trialflow.cli.definition import build_parser
from trialflow.cli.failures import _database_failure, _fail

if TYPE_CHECKING:
    pass


def main(argv: Sequence[str] | None = None) -> int:
    from trialflow.store.version import NotAStore, StoreSchemaError

    args = build_parser().parse_args(argv)
    try:
        result: Any = args.func(args)
    except (StoreSchemaError, NotAStore) as exc:  # another trialflow's store, or none: say so
        return _fail(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        said = _database_failure(exc)
        if said is None:
            raise
        return _fail(said)
    return int(result)


if __name__ == "__main__":
    sys.exit(main())
