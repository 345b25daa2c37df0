# Thin wrapper over packaging/dev.sh, for muscle memory.
.PHONY: demo test bench asan
demo test bench asan:
	./packaging/dev.sh $@
