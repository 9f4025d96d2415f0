# The mission's operations with curl, sourced by quickstart.sh (needs show, SOCK, REG).
# Each step prints the request and berthd's answer.
api() { curl -s --unix-socket "$SOCK" "$@"; }
# Creates, starts and waits for a container (each request shown); its id is left in $CID.
run_to_end() {
  show POST /v1.43/containers/create "$1"
  CID=$(echo "$LAST" | json_field Id)
  show POST "/v1.43/containers/$CID/start"
  show POST "/v1.43/containers/$CID/wait"
}
# Prints a container's stdout (frame headers dropped), as curl shows it; $2 is a comment.
show_logs() {
  echo; echo "\$ curl --unix-socket $SOCK 'http://localhost/v1.43/containers/$1/logs?stdout=1'${2:+   # $2}"
  api "http://localhost/v1.43/containers/$1/logs?stdout=1" | tr -d '\000\001\002' ; echo
}
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

echo; echo "# Networks: a user network, a web server on it with a published port, a client reaching it by name"
show GET /v1.43/networks
show POST /v1.43/networks/create '{"Name":"quickstart-net"}'
show POST "/v1.43/containers/create?name=qs-web" '{"Image":"'"$REG"'/busybox:latest","Cmd":["sh","-c","mkdir -p /www && echo hello from qs-web > /www/index.html && exec httpd -f -p 80 -h /www"],"ExposedPorts":{"80/tcp":{}},"HostConfig":{"NetworkMode":"quickstart-net","PortBindings":{"80/tcp":[{"HostIp":"127.0.0.1","HostPort":""}]}}}'
show POST /v1.43/containers/qs-web/start
show GET /v1.43/containers/qs-web/json
PORT=$(echo "$LAST" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).NetworkSettings.Ports["80/tcp"][0].HostPort))')
echo; echo "\$ curl http://127.0.0.1:$PORT/    # the published port, from the host"
for _ in 1 2 3 4 5 6 7 8 9 10; do curl -sf "http://127.0.0.1:$PORT/" && break; sleep 0.2; done
run_to_end '{"Image":"'"$REG"'/busybox:latest","Cmd":["wget","-q","-O","-","http://qs-web/"],"HostConfig":{"NetworkMode":"quickstart-net"}}'
NID=$CID
show_logs "$NID" "qs-web, reached by name"

echo; echo "# Volumes: a named volume written by one container and read by another"
show POST /v1.43/volumes/create '{"Name":"quickstart-data","Labels":{"from":"walkthrough"}}'
run_to_end '{"Image":"'"$REG"'/busybox:latest","Cmd":["sh","-c","echo kept in a volume > /data/note"],"HostConfig":{"Binds":["quickstart-data:/data"]}}'
VW=$CID
run_to_end '{"Image":"'"$REG"'/busybox:latest","Cmd":["cat","/data/note"],"HostConfig":{"Binds":["quickstart-data:/data:ro"]}}'
VR=$CID
show_logs "$VR"
show GET /v1.43/volumes
show GET /v1.43/system/df

echo; echo "# docker cp: stat a path, read it as a tar, write a tar into the container"
echo; echo "\$ curl -I --unix-socket $SOCK 'http://localhost/v1.43/containers/qs-web/archive?path=/www/index.html'"
api -I "http://localhost/v1.43/containers/qs-web/archive?path=/www/index.html" | grep -i '^X-Docker-Container-Path-Stat'
echo; echo "\$ curl --unix-socket $SOCK 'http://localhost/v1.43/containers/qs-web/archive?path=/www' | tar -tv"
api "http://localhost/v1.43/containers/qs-web/archive?path=/www" | tar -tv
mkdir -p "$Q/cp" && echo "put there by docker cp" >"$Q/cp/added.html"
echo; echo "\$ tar -C $Q/cp -c added.html | curl -X PUT --unix-socket $SOCK --data-binary @- 'http://localhost/v1.43/containers/qs-web/archive?path=/www'"
tar -C "$Q/cp" -c added.html | api -X PUT -w '[HTTP %{http_code}]\n' --data-binary @- "http://localhost/v1.43/containers/qs-web/archive?path=/www"
echo; echo "\$ curl http://127.0.0.1:$PORT/added.html"
curl -s "http://127.0.0.1:$PORT/added.html"

echo; echo "# Images leave berth too: save to a tar, remove, load it back; push to the local registry"
echo; echo "\$ curl --unix-socket $SOCK 'http://localhost/v1.43/images/get?names=quickstart/ticker:v1' -o $Q/ticker.tar"
api "http://localhost/v1.43/images/get?names=quickstart/ticker:v1" -o "$Q/ticker.tar" && tar -tf "$Q/ticker.tar"
show DELETE /v1.43/images/quickstart/ticker:v1
echo; echo "\$ curl -X POST --unix-socket $SOCK --data-binary @$Q/ticker.tar 'http://localhost/v1.43/images/load?quiet=1'"
api -X POST -H 'Content-Type: application/x-tar' --data-binary "@$Q/ticker.tar" "http://localhost/v1.43/images/load?quiet=1"; echo
show POST "/v1.43/images/quickstart/ticker:v1/tag?repo=$REG/quickstart/ticker&tag=v1"
echo; echo "\$ curl -X POST --unix-socket $SOCK -H 'X-Registry-Auth: e30=' 'http://localhost/v1.43/images/$REG/quickstart/ticker/push?tag=v1'"
api -X POST -H 'X-Registry-Auth: e30=' "http://localhost/v1.43/images/$REG/quickstart/ticker/push?tag=v1"; echo

echo; echo "# Build an image from a Dockerfile (the classic builder), then again: every step from the cache"
mkdir -p "$Q/build"
printf 'FROM %s/busybox:latest\nARG WHO=world\nCOPY greeting.txt /greeting.txt\nRUN echo "hello $WHO" >> /greeting.txt\nCMD ["cat", "/greeting.txt"]\n' "$REG" >"$Q/build/Dockerfile"
echo "built by berth" >"$Q/build/greeting.txt"
tar -C "$Q/build" -cf "$Q/context.tar" Dockerfile greeting.txt
for round in first cached; do
  echo; echo "\$ curl -X POST --unix-socket $SOCK -H 'Content-Type: application/x-tar' --data-binary @$Q/context.tar 'http://localhost/v1.43/build?t=quickstart/built:v1&buildargs={\"WHO\":\"quickstart\"}'   # $round"
  api -X POST -H 'Content-Type: application/x-tar' --data-binary "@$Q/context.tar" \
    "http://localhost/v1.43/build?t=quickstart/built:v1&buildargs=%7B%22WHO%22%3A%22quickstart%22%7D"
done
run_to_end '{"Image":"quickstart/built:v1"}'
BID=$CID
show_logs "$BID" "the built image's CMD"
show DELETE "/v1.43/containers/$BID"
show DELETE /v1.43/images/quickstart/built:v1

echo; echo "# Clean up the containers, the volume and the network"
show DELETE "/v1.43/containers/$ID"
show DELETE "/v1.43/containers/ticker?force=1"
show DELETE "/v1.43/containers/$NID"
show DELETE "/v1.43/containers/qs-web?force=1"
show DELETE /v1.43/networks/quickstart-net
show DELETE "/v1.43/containers/$VW"
show DELETE "/v1.43/containers/$VR"
show DELETE /v1.43/volumes/quickstart-data
