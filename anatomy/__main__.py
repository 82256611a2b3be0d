from anatomy.cli.main import main

raise SystemExit(main())
