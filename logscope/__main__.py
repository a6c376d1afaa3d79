from logscope.cli import main

main()
