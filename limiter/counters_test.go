package limiter

import (
	"reflect"
	"testing"
)

// TestPoolCountersAllReachTheStatus: every counter a pool keeps reaches
// its PoolStatus, under the same name.
func TestPoolCountersAllReachTheStatus(t *testing.T) {
	var c poolCounters
	cv := reflect.ValueOf(&c).Elem()
	for i := range cv.NumField() {
		f := cv.Field(i)
		if f.Kind() == reflect.Int64 {
			f.SetInt(int64(i + 1))
		} else {
			for j := range f.Len() {
				f.Index(j).SetInt(int64(100*i + j + 1))
			}
		}
	}
	s := reflect.ValueOf(c.status())
	for i := range cv.NumField() {
		name := cv.Type().Field(i).Name
		if got := s.FieldByName(name); !got.IsValid() || !reflect.DeepEqual(got.Interface(), cv.Field(i).Interface()) {
			t.Errorf("PoolStatus.%s is %v, want the counter's %v", name, got, cv.Field(i))
		}
	}
}
