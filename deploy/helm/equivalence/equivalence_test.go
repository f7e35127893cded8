// Package equivalence checks that the Helm chart (deploy/helm/opreg) with its
// default values renders the objects of the kustomize base (deploy/kubernetes):
// the two must not drift apart. Run by deploy/helm/check.sh:
//
//	HELM=/path/to/helm GOTOOLCHAIN=local go test ./...
package equivalence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"
)

var (
	repo  = filepath.Join("..", "..", "..")
	base  = filepath.Join(repo, "deploy", "kubernetes")
	chart = filepath.Join(repo, "deploy", "helm", "opreg")
)

// Labels Helm's conventions add and the base has no counterpart for; removed
// from the chart's objects and pod template, never from selectors (a selector
// the base lacks would be a real difference: selectors are immutable).
var helmLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/managed-by",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
}

type object = map[string]any

type rendering struct{ base, chart []object }

// Both renderings once for every test.
var rendered = sync.OnceValues(func() (rendering, error) {
	var r rendering
	var err error
	if r.base, err = renderBase(); err != nil {
		return r, err
	}
	r.chart, err = renderChart()
	return r, err
})

// The kustomize base, in-process, as `kubectl apply -k deploy/kubernetes` would.
func renderBase() ([]object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), base)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", base, err)
	}
	var objects []object
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		objects = append(objects, plain(m))
	}
	return objects, nil
}

// `helm template opreg <chart>` with default values; helm from $HELM or PATH.
func renderChart() ([]object, error) {
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = "helm"
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, "template", "opreg", chart)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s template opreg %s: %w\n%s", helm, chart, err, stderr.String())
	}
	nodes, err := kio.FromBytes(stdout.Bytes())
	if err != nil {
		return nil, err
	}
	var objects []object
	for _, n := range nodes {
		m, err := n.Map()
		if err != nil {
			return nil, err
		}
		objects = append(objects, plain(m))
	}
	return objects, nil
}

// A deep copy through JSON, so that numbers compare alike (float64) whichever
// YAML decoder read them.
func plain(v any) object {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		panic(err)
	}
	return o
}

func key(o object) string {
	meta, _ := o["metadata"].(object)
	return fmt.Sprintf("%v/%v", o["kind"], meta["name"])
}

// Removes Helm's bookkeeping labels from the object's and its pod template's
// metadata (a map left empty goes too).
func withoutHelmLabels(o object) object {
	o = plain(o)
	strip := func(meta any) {
		m, _ := meta.(object)
		labels, _ := m["labels"].(object)
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if labels != nil && len(labels) == 0 {
			delete(m, "labels")
		}
	}
	strip(o["metadata"])
	if spec, ok := o["spec"].(object); ok {
		if template, ok := spec["template"].(object); ok {
			strip(template["metadata"])
		}
	}
	return o
}

// Every object of the base must be in the chart, equal field for field after
// withoutHelmLabels: the whole Deployment (pod template, probes, env, volumes,
// init container, strategy, replicas...), the Service, the PodDisruptionBudget
// and the ServiceMonitor. Objects only the chart has are not compared here.
// Returns one readable diff per object that differs.
func compare(baseObjects, chartObjects []object) []string {
	byKey := map[string]object{}
	for _, o := range chartObjects {
		byKey[key(o)] = o
	}
	var problems []string
	for _, b := range baseObjects {
		c, ok := byKey[key(b)]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: in the kustomize base, not rendered by the chart", key(b)))
			continue
		}
		if diff := cmp.Diff(withoutHelmLabels(b), withoutHelmLabels(c)); diff != "" {
			problems = append(problems, fmt.Sprintf("%s differs (-kustomize base +helm chart):\n%s", key(b), diff))
		}
	}
	return problems
}

func render(t *testing.T) rendering {
	t.Helper()
	r, err := rendered()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestChartRendersTheKustomizeBase(t *testing.T) {
	r := render(t)
	// Not vacuous: the objects the check is about are there.
	keys := map[string]bool{}
	for _, o := range r.base {
		keys[key(o)] = true
	}
	for _, want := range []string{"Deployment/opreg", "Service/opreg"} {
		if !keys[want] {
			t.Fatalf("the kustomize base renders no %s (it has %v)", want, keys)
		}
	}
	for _, problem := range compare(r.base, r.chart) {
		t.Error(problem)
	}
}

// The check must see a difference where there is one: plant some in a copy
// of the chart's objects and expect each in the report.
func TestComparisonCatchesPlantedDifferences(t *testing.T) {
	r := render(t)
	if problems := compare(r.base, r.chart); len(problems) != 0 {
		t.Skip("the chart already differs; TestChartRendersTheKustomizeBase reports how")
	}
	planted := make([]object, len(r.chart))
	for i, o := range r.chart {
		planted[i] = plain(o)
		switch key(o) {
		case "Deployment/opreg":
			pod := planted[i]["spec"].(object)["template"].(object)["spec"].(object)
			server := pod["containers"].([]any)[0].(object)
			server["readinessProbe"].(object)["httpGet"].(object)["path"] = "/planted-readyz"
			for _, e := range server["env"].([]any) {
				if e.(object)["name"] == "OPREG_RETENTION" {
					e.(object)["value"] = "7d"
				}
			}
		case "Service/opreg":
			port := planted[i]["spec"].(object)["ports"].([]any)[1].(object)
			port["port"] = 9999.0
		}
	}
	report := strings.Join(compare(r.base, planted), "\n")
	for _, want := range []string{"Deployment/opreg differs", "/planted-readyz", `"7d"`, "Service/opreg differs", "9999"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report does not mention %q:\n%s", want, report)
		}
	}
}

// The chart's PrometheusRule and dashboard are deploy/prometheus/rules.yml and
// deploy/grafana/opreg.json themselves (through the symlinks in files/).
func TestChartCarriesTheRulesAndTheDashboard(t *testing.T) {
	r := render(t)
	byKey := map[string]object{}
	for _, o := range r.chart {
		byKey[key(o)] = o
	}

	rulesFile, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules object
	if err := yaml.Unmarshal(rulesFile, &rules); err != nil {
		t.Fatal(err)
	}
	if rule, ok := byKey["PrometheusRule/opreg"]; !ok {
		t.Error("the chart renders no PrometheusRule/opreg")
	} else if diff := cmp.Diff(plain(rules)["groups"], rule["spec"].(object)["groups"]); diff != "" {
		t.Errorf("PrometheusRule spec.groups differ from rules.yml's groups (-rules.yml +chart):\n%s", diff)
	}

	dashboardFile, err := os.ReadFile(filepath.Join(repo, "deploy", "grafana", "opreg.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm, ok := byKey["ConfigMap/opreg-dashboard"]; !ok {
		t.Error("the chart renders no ConfigMap/opreg-dashboard")
	} else {
		var want, got any
		if err := json.Unmarshal(dashboardFile, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(cm["data"].(object)["opreg.json"].(string)), &got); err != nil {
			t.Fatalf("the dashboard ConfigMap holds no JSON: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the dashboard ConfigMap differs from opreg.json (-file +chart):\n%s", diff)
		}
	}
}
