from attnscale.cli import main

raise SystemExit(main())
