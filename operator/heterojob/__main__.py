from heterojob.cli import main

raise SystemExit(main())
