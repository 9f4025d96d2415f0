# The mission's operations with curl, sourced by quickstart.sh (needs show, SOCK, REG).
# Each step prints the request and berthd's answer.
api() { curl -s --unix-socket "$SOCK" "$@"; }
json_field() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const v=JSON.parse(s);console.log(process.argv[1].split(".").reduce((o,k)=>o[k],v))})' "$1"; }

echo; echo "# Pull busybox from the local registry (progress stream)"
show POST "/v1.43/images/create?fromImage=$REG/busybox&tag=latest"
show GET /v1.43/images/json

echo; echo "# Foreground: create, start, wait, logs"
show POST /v1.43/containers/create '{"Image":"'"$REG"'/busybox:latest","Cmd":["echo","hello world"]}'
ID=$(echo "$LAST" | json_field Id)
show POST "/v1.43/containers/$ID/start"
show POST "/v1.43/containers/$ID/wait"
echo; echo "\$ curl --unix-socket $SOCK 'http://localhost/v1.43/containers/$ID/logs?stdout=1' | od -c   # multiplexed frame"
api "http://localhost/v1.43/containers/$ID/logs?stdout=1" | od -c | head -3

echo; echo "# Background: create, start, list, stop, logs"
show POST "/v1.43/containers/create?name=ticker" '{"Image":"'"$REG"'/busybox:latest","Cmd":["sh","-c","trap \"exit 0\" TERM; while true; do date; sleep 1; done"]}'
show POST /v1.43/containers/ticker/start
sleep 1.5
show GET /v1.43/containers/json
show POST "/v1.43/containers/ticker/stop?t=3"
show GET "/v1.43/containers/json?all=1&filters=%7B%22name%22%3A%5B%22ticker%22%5D%7D"
echo; echo "\$ curl --unix-socket $SOCK 'http://localhost/v1.43/containers/ticker/logs?stdout=1&tail=2&timestamps=1'"
api "http://localhost/v1.43/containers/ticker/logs?stdout=1&tail=2&timestamps=1" | tr -d '\000\001\002' ; echo

echo; echo "# Commit the ticker's filesystem into a new image"
show POST "/v1.43/commit?container=ticker&repo=quickstart/ticker&tag=v1&comment=from+the+walkthrough"
show GET "/v1.43/images/json?filters=%7B%22reference%22%3A%5B%22quickstart%2F*%22%5D%7D"

echo; echo "# Clean up the containers"
show DELETE "/v1.43/containers/$ID"
show DELETE "/v1.43/containers/ticker?force=1"
