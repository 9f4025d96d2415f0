// A client of berthd written against the official Go SDK (Debian's
// golang-github-docker-docker-dev), built by test/clients/go-sdk.test.ts in
// GOPATH mode. Each subcommand runs one user-level sequence through the SDK and
// prints what it observed as one JSON object; any SDK error exits non-zero.
//
//	client foreground IMAGE CMD...   create, start, wait, logs (stdcopy)
//	client background IMAGE NAME     create, start, list, logs, stop, list all
//	client pull REF                  pull (progress stream to its end), image list
//	client health IMAGE              a passing and a failing Healthcheck, until healthy / unhealthy
//	client kill IMAGE                SIGKILL a container; SIGTERM a shell that traps it
//	client exec IMAGE                an exec with a TTY; execs that cannot start (126)
//	client pidmode IMAGE             /proc/1/comm with PidMode host and with its own
//	client groupadd IMAGE            id -G with GroupAdd
//	client devicerules IMAGE         a device node made and opened, with and without a DeviceCgroupRules rule
//	client logdriver IMAGE           a create with an unknown log driver
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
)

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: client foreground|background|pull ARGS"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	check(err)
	defer cli.Close()
	// Negotiation happens on the first request; ping so the version is known up front.
	_, err = cli.Ping(ctx)
	check(err)

	out := map[string]interface{}{"apiVersion": cli.ClientVersion()}
	switch os.Args[1] {
	case "foreground":
		foreground(ctx, cli, os.Args[2], os.Args[3:], out)
	case "background":
		background(ctx, cli, os.Args[2], os.Args[3], out)
	case "pull":
		pull(ctx, cli, os.Args[2], out)
	case "health":
		health(ctx, cli, os.Args[2], out)
	case "kill":
		kill(ctx, cli, os.Args[2], out)
	case "exec":
		execs(ctx, cli, os.Args[2], out)
	case "pidmode":
		pidMode(ctx, cli, os.Args[2], out)
	case "groupadd":
		out["run"] = runToEnd(ctx, cli, &container.Config{Image: os.Args[2], Cmd: []string{"id", "-G"}},
			&container.HostConfig{GroupAdd: []string{"app", "4242"}})
	case "devicerules":
		deviceRules(ctx, cli, os.Args[2], out)
	case "logdriver":
		_, err := cli.ContainerCreate(ctx, &container.Config{Image: os.Args[2], Cmd: []string{"true"}},
			&container.HostConfig{LogConfig: container.LogConfig{Type: "nope"}}, nil, nil, "")
		out["invalidParameter"] = errdefs.IsInvalidParameter(err)
		out["error"] = fmt.Sprint(err)
	default:
		fail(fmt.Errorf("unknown subcommand %q", os.Args[1]))
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

func foreground(ctx context.Context, cli *client.Client, image string, cmd []string, out map[string]interface{}) {
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: cmd}, nil, nil, nil, "")
	check(err)
	out["id"] = created.ID
	out["warnings"] = created.Warnings
	// As `docker run` does: wait for the next exit before starting, so the exit cannot be missed.
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))
	select {
	case res := <-waitC:
		out["statusCode"] = res.StatusCode
	case err := <-errC:
		fail(err)
	}
	stdout, stderr := logs(ctx, cli, created.ID)
	out["stdout"] = stdout
	out["stderr"] = stderr
}

func background(ctx context.Context, cli *client.Client, image, name string, out map[string]interface{}) {
	cmd := []string{"sh", "-c", `trap "echo bye; exit 0" TERM; echo started; while true; do sleep 0.1; done`}
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: cmd}, nil, nil, nil, name)
	check(err)
	out["id"] = created.ID
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))

	running, err := cli.ContainerList(ctx, types.ContainerListOptions{})
	check(err)
	for _, c := range running {
		if c.ID == created.ID {
			out["listed"] = map[string]interface{}{"names": c.Names, "image": c.Image, "state": c.State, "status": c.Status}
		}
	}

	// The logs can be read while it runs: wait for its first line.
	waitLogs(ctx, cli, created.ID, "started")
	timeout := 5 * time.Second
	check(cli.ContainerStop(ctx, created.ID, &timeout))
	out["stdout"], _ = logs(ctx, cli, created.ID)

	stillRunning, err := cli.ContainerList(ctx, types.ContainerListOptions{Filters: filters.NewArgs(filters.Arg("id", created.ID))})
	check(err)
	out["runningAfterStop"] = len(stillRunning)
	all, err := cli.ContainerList(ctx, types.ContainerListOptions{All: true, Filters: filters.NewArgs(filters.Arg("id", created.ID))})
	check(err)
	for _, c := range all {
		out["listedAfterStop"] = map[string]interface{}{"state": c.State, "status": c.Status}
	}
	inspect, err := cli.ContainerInspect(ctx, created.ID)
	check(err)
	out["exitCode"] = inspect.State.ExitCode
	check(cli.ContainerRemove(ctx, created.ID, types.ContainerRemoveOptions{}))
}

func pull(ctx context.Context, cli *client.Client, ref string, out map[string]interface{}) {
	rc, err := cli.ImagePull(ctx, ref, types.ImagePullOptions{})
	check(err)
	var statuses []string
	scanner := bufio.NewScanner(rc)
	for scanner.Scan() {
		var msg struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		check(json.Unmarshal(scanner.Bytes(), &msg))
		if msg.Error != "" {
			fail(fmt.Errorf("pull: %s", msg.Error))
		}
		statuses = append(statuses, msg.Status)
	}
	check(scanner.Err())
	check(rc.Close())
	out["statuses"] = statuses
	images, err := cli.ImageList(ctx, types.ImageListOptions{})
	check(err)
	var tags []string
	for _, img := range images {
		tags = append(tags, img.RepoTags...)
	}
	out["repoTags"] = tags
}

// health runs a container whose check passes and one whose check fails, each until
// inspect shows the status that follows, and reports that State.Health.
func health(ctx context.Context, cli *client.Client, image string, out map[string]interface{}) {
	interval := 100 * time.Millisecond
	checks := map[string]*container.HealthConfig{
		"healthy":   {Test: []string{"CMD-SHELL", "echo ok"}, Interval: interval},
		"unhealthy": {Test: []string{"CMD-SHELL", "echo bad; exit 3"}, Interval: interval, Retries: 2},
	}
	for status, check := range checks {
		id := startDetached(ctx, cli, &container.Config{Image: image, Cmd: []string{"sleep", "300"}, Healthcheck: check}, nil)
		state := waitState(ctx, cli, id, func(s *types.ContainerState) bool { return s.Health != nil && s.Health.Status == status })
		out[status] = state.Health
		remove(ctx, cli, id)
	}
}

// kill sends SIGKILL to a sleeping container, and SIGTERM to a shell that traps it.
func kill(ctx context.Context, cli *client.Client, image string, out map[string]interface{}) {
	id := startDetached(ctx, cli, &container.Config{Image: image, Cmd: []string{"sleep", "300"}}, nil)
	check(cli.ContainerKill(ctx, id, "SIGKILL"))
	inspect, err := cli.ContainerInspect(ctx, id)
	check(err)
	out["killed"] = map[string]interface{}{"status": inspect.State.Status, "running": inspect.State.Running, "exitCode": inspect.State.ExitCode}
	remove(ctx, cli, id)

	trap := `trap "echo got TERM; exit 42" TERM; echo ready; while :; do sleep 0.1; done`
	id = startDetached(ctx, cli, &container.Config{Image: image, Cmd: []string{"sh", "-c", trap}}, nil)
	waitLogs(ctx, cli, id, "ready")
	waitC, errC := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	check(cli.ContainerKill(ctx, id, "SIGTERM"))
	select {
	case res := <-waitC:
		stdout, _ := logs(ctx, cli, id)
		out["trapped"] = map[string]interface{}{"statusCode": res.StatusCode, "stdout": stdout}
	case err := <-errC:
		fail(err)
	}
	remove(ctx, cli, id)
}

// execs runs, in a running container, an exec with a TTY and two that cannot start.
func execs(ctx context.Context, cli *client.Client, image string, out map[string]interface{}) {
	id := startDetached(ctx, cli, &container.Config{Image: image, Cmd: []string{"sleep", "300"}}, nil)
	out["tty"] = execRun(ctx, cli, id, []string{"sh", "-c", "echo one; echo two"}, true)
	out["missing"] = execRun(ctx, cli, id, []string{"no-such-command"}, false)
	out["notExecutable"] = execRun(ctx, cli, id, []string{"/etc/passwd"}, false)
	remove(ctx, cli, id)
}

// execRun creates and attaches to an exec, reads its output to the end (raw with a TTY,
// else split by stdcopy), and reports it with the exec's inspect.
func execRun(ctx context.Context, cli *client.Client, id string, cmd []string, tty bool) map[string]interface{} {
	created, err := cli.ContainerExecCreate(ctx, id, types.ExecConfig{Cmd: cmd, AttachStdout: true, AttachStderr: true, Tty: tty})
	check(err)
	resp, err := cli.ContainerExecAttach(ctx, created.ID, types.ExecStartCheck{Tty: tty})
	check(err)
	var stdout, stderr bytes.Buffer
	if tty {
		_, err = io.Copy(&stdout, resp.Reader)
	} else {
		_, err = stdcopy.StdCopy(&stdout, &stderr, resp.Reader)
	}
	check(err)
	resp.Close()
	inspect, err := cli.ContainerExecInspect(ctx, created.ID)
	check(err)
	return map[string]interface{}{"stdout": stdout.String(), "stderr": stderr.String(), "exitCode": inspect.ExitCode, "running": inspect.Running}
}

// pidMode reads /proc/1/comm with the host's PID namespace and with the container's own.
func pidMode(ctx context.Context, cli *client.Client, image string, out map[string]interface{}) {
	cfg := &container.Config{Image: image, Cmd: []string{"cat", "/proc/1/comm"}}
	out["host"] = runToEnd(ctx, cli, cfg, &container.HostConfig{PidMode: "host"})
	out["own"] = runToEnd(ctx, cli, cfg, &container.HostConfig{})
}

// deviceRules makes /dev/fuse's node (c 10:229) and opens it, with a rule that allows it and without.
func deviceRules(ctx context.Context, cli *client.Client, image string, out map[string]interface{}) {
	probe := "mknod /dev/f c 10 229 && echo made; (: > /dev/f) 2>/dev/null && echo opened || echo refused"
	cfg := &container.Config{Image: image, Cmd: []string{"sh", "-c", probe}}
	allowed := &container.HostConfig{Resources: container.Resources{DeviceCgroupRules: []string{"c 10:229 rwm"}}}
	out["allowed"] = runToEnd(ctx, cli, cfg, allowed)
	out["denied"] = runToEnd(ctx, cli, cfg, &container.HostConfig{})
}

// runToEnd creates and starts a container, waits for it, and reports its exit code,
// output and inspected HostConfig; then removes it.
func runToEnd(ctx context.Context, cli *client.Client, cfg *container.Config, hc *container.HostConfig) map[string]interface{} {
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	check(err)
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))
	out := map[string]interface{}{}
	select {
	case res := <-waitC:
		out["statusCode"] = res.StatusCode
	case err := <-errC:
		fail(err)
	}
	out["stdout"], out["stderr"] = logs(ctx, cli, created.ID)
	inspect, err := cli.ContainerInspect(ctx, created.ID)
	check(err)
	out["hostConfig"] = inspect.HostConfig
	remove(ctx, cli, created.ID)
	return out
}

func startDetached(ctx context.Context, cli *client.Client, cfg *container.Config, hc *container.HostConfig) string {
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	check(err)
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))
	return created.ID
}

// waitState polls inspect until the container's state satisfies ok.
func waitState(ctx context.Context, cli *client.Client, id string, ok func(*types.ContainerState) bool) *types.ContainerState {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		inspect, err := cli.ContainerInspect(ctx, id)
		check(err)
		if ok(inspect.State) {
			return inspect.State
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("container %s never reached the state awaited; last: %+v", id, inspect.State))
		}
	}
}

// waitLogs polls the logs until they hold text.
func waitLogs(ctx context.Context, cli *client.Client, id, text string) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if stdout, _ := logs(ctx, cli, id); strings.Contains(stdout, text) {
			return
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("container %s never logged %q", id, text))
		}
	}
}

func remove(ctx context.Context, cli *client.Client, id string) {
	check(cli.ContainerRemove(ctx, id, types.ContainerRemoveOptions{Force: true}))
}

// logs reads a container's whole log, split by stdcopy as the SDK's users do.
func logs(ctx context.Context, cli *client.Client, id string) (string, string) {
	rc, err := cli.ContainerLogs(ctx, id, types.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	check(err)
	defer rc.Close()
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, rc)
	if err != nil && err != io.EOF {
		fail(err)
	}
	return stdout.String(), stderr.String()
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}
