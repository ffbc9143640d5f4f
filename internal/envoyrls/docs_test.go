package envoyrls_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/internal/poolsfile"
	"github.com/tollgate/tollgate/server"
)

// yamlBlocks returns the YAML code blocks of a Markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		out = append(out, strings.SplitN(part, "```", 2)[0])
	}
	return out
}

// TestDocsEnvoy: the pools and the Envoy configuration of docs/envoy.md
// work together: each descriptor the Envoy routes send matches the pool
// the doc says, and the rate-limit service is the cluster on Tollgate's
// default port over HTTP/2 with the V3 API.
func TestDocsEnvoy(t *testing.T) {
	blocks := yamlBlocks(t, "../../docs/envoy.md")
	if len(blocks) != 2 {
		t.Fatalf("%d YAML blocks; want the pools file and Envoy's configuration", len(blocks))
	}
	pools, err := poolsfile.Parse("docs/envoy.md", []byte(blocks[0]))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, server.Config{})
	for _, p := range pools {
		if _, err := e.srv.Engine().CreatePool(p); err != nil {
			t.Fatal(err)
		}
	}
	resp := e.ask("edge", 0, desc("remote_address", "203.0.113.7"), desc("header_match", "login"))
	if n0, n1 := resp.Statuses[0].GetCurrentLimit().GetName(), resp.Statuses[1].GetCurrentLimit().GetName(); n0 != "edge-per-ip" || n1 != "edge-login" {
		t.Fatalf("descriptors matched %q and %q", n0, n1)
	}

	var cfg struct {
		StaticResources struct {
			Clusters []struct {
				Name    string         `yaml:"name"`
				Options map[string]any `yaml:"typed_extension_protocol_options"`
				Load    struct {
					Endpoints []struct {
						LB []struct {
							Endpoint struct {
								Address struct {
									Socket struct {
										Port int `yaml:"port_value"`
									} `yaml:"socket_address"`
								} `yaml:"address"`
							} `yaml:"endpoint"`
						} `yaml:"lb_endpoints"`
					} `yaml:"endpoints"`
				} `yaml:"load_assignment"`
			} `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal([]byte(blocks[1]), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transport_api_version: V3", "cluster_name: tollgate}", "domain: edge", "http2_protocol_options: {}", "remote_address: {}", "descriptor_value: login"} {
		if !strings.Contains(blocks[1], want) {
			t.Errorf("Envoy's configuration lacks %q", want)
		}
	}
	c := cfg.StaticResources.Clusters
	if len(c) != 1 || c[0].Name != "tollgate" || c[0].Options == nil ||
		c[0].Load.Endpoints[0].LB[0].Endpoint.Address.Socket.Port != 7070 {
		t.Fatalf("cluster %+v: want tollgate on port 7070 (serve's default --listen) over HTTP/2", c)
	}
}
