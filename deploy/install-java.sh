#!/usr/bin/env bash
# A Java 17+ runtime for the Kafka broker that `docstream run` starts (docstream_cli.embedded_kafka), and Maven,
# which deploy/local/stack runs once to fetch the broker's jars; run by `make setup`. Idempotent and quick
# when installed: it asks `java -version` and looks for `mvn`. As root it installs Debian's
# default-jre-headless (Java 17 on bookworm, 21 on trixie) and maven with apt; otherwise it prints the command
# and exits 0, so `make setup` goes on (`docstream run` then says java_missing).
# The java it looks at is the one docstream runs: $JAVA_HOME/bin/java when JAVA_HOME is set, else PATH's.
# deploy/install-java.sh --check: exit 0 when that java is 17 or newer, else 1; installs and prints nothing.
set -euo pipefail
min_major=17

java_path() {  # the java docstream runs (docstream_cli.embedded_kafka.java_binary), or nothing
  if [ -n "${JAVA_HOME:-}" ]; then echo "$JAVA_HOME/bin/java"; else command -v java || true; fi
}

java_major() {  # the major version of java $1 ("17.0.15" -> 17, "1.8.0_392" -> 8); 0 when it does not run
  local version major
  [ -x "$1" ] || { echo 0; return; }
  version=$("$1" -version 2>&1 | sed -n 's/.* version "\([0-9][0-9.]*\).*/\1/p' | head -n 1) || true
  major=${version%%.*}
  [ "$major" = 1 ] && { major=${version#1.}; major=${major%%.*}; }
  case "$major" in ''|*[!0-9]*) echo 0;; *) echo "$major";; esac
}

java_ok() {
  local java
  java=$(java_path)
  [ -n "$java" ] && [ "$(java_major "$java")" -ge "$min_major" ]
}

case "${1:-}" in
  --check) java_ok; exit;;
  "") ;;
  *) echo "usage: deploy/install-java.sh [--check]" >&2; exit 2;;
esac

packages=() needs=()
if ! java_ok; then
  java=$(java_path)
  if [ -n "${JAVA_HOME:-}" ]; then
    # docstream runs JAVA_HOME's java and no other: installing Debian's would not change that
    echo "JAVA_HOME=$JAVA_HOME holds no Java $min_major+ (bin/java: $([ -x "$java" ] && echo "Java $(java_major "$java")" || echo missing)):" \
      "point it at one, or unset it to use the java on PATH (deploy/install-java.sh installs Debian's)" >&2
  else
    packages+=(default-jre-headless) needs+=("a Java $min_major+ runtime for the Kafka broker of 'docstream run'")
  fi
fi
command -v mvn >/dev/null || { packages+=(maven) needs+=("Maven, which fetches the broker's jars once"); }
if [ "${#packages[@]}" = 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  printf -v what '%s; ' "${needs[@]}"
  echo "missing: ${what%; }. Run 'sudo apt-get install -y --no-install-recommends ${packages[*]}'" \
    "(or 'sudo deploy/install-java.sh')" >&2
  exit 0
fi
echo "installing Debian's ${packages[*]} for the Kafka broker of 'docstream run' (once)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
command -v mvn >/dev/null
if [ -z "${JAVA_HOME:-}" ] && ! java_ok; then
  java=$(java_path)
  echo "Debian's default-jre-headless here is Java $(java_major "${java:-none}"), and Kafka needs $min_major+:" \
    "install a newer one (openjdk-17-jre-headless from backports, or Temurin) and set JAVA_HOME" >&2
fi
