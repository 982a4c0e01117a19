"""`python -m localllm` hands off to the CLI."""

from localllm.cli.main import main

raise SystemExit(main())
