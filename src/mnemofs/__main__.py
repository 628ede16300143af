from mnemofs.cli import main

main()
