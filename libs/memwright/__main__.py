from memwright.cli import main

main()
