from hango.cli import main

main()
