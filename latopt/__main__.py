from latopt.cli import entry

entry()
