# Developer entry points. CI runs .ci/run, which calls the same commands.
CARGO ?= cargo

.PHONY: test lint fmt ci

## test: the project's tests (the README's test command)
test:
	$(CARGO) nextest run --workspace --profile ci

## lint: formatting and clippy, as CI checks them
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --all-features -- -D warnings

fmt:
	$(CARGO) fmt --all

## ci: exactly what CI runs
ci:
	bash .ci/run
