#!/bin/sh
# Runs an example program with the classpath `mvn package` wrote, e.g.
#   sdks/java/examples/run.sh io.jobwire.examples.Greet
# Build it first: mvn -q package -f sdks/java -Dmaven.test.skip=true. JAVA_OPTS go to the JVM.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
exec java ${JAVA_OPTS:-} -cp "$dir/target/jobwire-examples-0.1.0.jar:$(cat "$dir/target/classpath.txt")" "$@"
