package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Dockerfile's command and health check and the Kubernetes example's
// arguments and probes use flags and paths that serve and healthcheck have.
func TestDeployFilesMatchTheBinary(t *testing.T) {
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var serveArgs, healthArgs []string
	for _, m := range []struct {
		re   string
		dest *[]string
	}{{`(?m)^CMD (\[.*\])$`, &serveArgs}, {`(?m)^  CMD (\[.*\])$`, &healthArgs}} {
		sub := regexp.MustCompile(m.re).FindSubmatch(docker)
		if sub == nil || json.Unmarshal(sub[1], m.dest) != nil {
			t.Fatalf("no %s in the Dockerfile", m.re)
		}
	}
	checkFlags(t, "Dockerfile CMD", serveArgs)
	checkFlags(t, "Dockerfile HEALTHCHECK", healthArgs[1:]) // after /tollgate

	f, err := os.Open("../../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	found := false
	for {
		var doc struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct{ Args []string }
					}
				}
			}
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc.Kind != "StatefulSet" {
			continue
		}
		found = true
		checkFlags(t, "deploy/kubernetes.yaml args", doc.Spec.Template.Spec.Containers[0].Args)
	}
	if !found {
		t.Fatal("no StatefulSet in deploy/kubernetes.yaml")
	}
	k8s, _ := os.ReadFile("../../deploy/kubernetes.yaml")
	for _, want := range []string{"livenessProbe:\n            httpGet:\n              path: /healthz\n              port: http", "readinessProbe:\n            httpGet:\n              path: /readyz\n              port: http", "containerPort: 7071", "--http=0.0.0.0:7071"} {
		if !bytes.Contains(k8s, []byte(want)) {
			t.Errorf("deploy/kubernetes.yaml lacks %q", want)
		}
	}
}

// checkFlags fails unless the command line args (a subcommand and its
// flags) parse.
func checkFlags(t *testing.T, where string, args []string) {
	t.Helper()
	root, _, _ := newRootCmd(io.Discard, io.Discard, func(string) string { return "" })
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("%s: %v names no command (%v)", where, args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: %v: %v", where, args, err)
	}
	if len(cmd.Flags().Args()) != 0 {
		t.Fatalf("%s: %v: stray arguments %v", where, args, cmd.Flags().Args())
	}
}
