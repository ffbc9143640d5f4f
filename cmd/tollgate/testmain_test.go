package main

import (
	"os"
	"testing"

	"github.com/tollgate/tollgate/internal/hatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	hatest.CleanBuilds()
	os.Exit(code)
}
