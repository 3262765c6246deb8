package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
)

// writePlot draws the scaling curves — exec latency against concurrent SSH
// sessions, proxy round trip against concurrent tunnels — as two log-log
// panels side by side, p50 solid and p99 dashed, from the run's own results.
func writePlot(path string, curves []*curve) error {
	const panelW, h = 640, 500
	panels := []struct{ group, title, xlabel string }{
		{"exec", "SSH exec of TRUE: latency", "concurrent sessions"},
		{"proxy", "Proxy: 64-byte round trip", "concurrent tunnels"},
	}
	img := image.NewRGBA(image.Rect(0, 0, panelW*len(panels), h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for i, p := range panels {
		var cs []*curve
		for _, c := range curves {
			if c.group == p.group && len(c.points) > 0 {
				cs = append(cs, c)
			}
		}
		drawPanel(img, image.Rect(i*panelW, 0, (i+1)*panelW, h), p.title, p.xlabel, cs)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var (
	black     = color.RGBA{0x20, 0x20, 0x20, 0xff}
	gridMajor = color.RGBA{0xc8, 0xc8, 0xc8, 0xff}
	gridMinor = color.RGBA{0xec, 0xec, 0xec, 0xff}
)

// seriesColor keeps a side's color the same in both panels.
func seriesColor(name string) color.RGBA {
	switch name {
	case "sandboxd":
		return color.RGBA{0x1f, 0x63, 0xc4, 0xff}
	case "OpenSSH sshd":
		return color.RGBA{0xe0, 0x6c, 0x00, 0xff}
	case "direct":
		return color.RGBA{0x70, 0x70, 0x70, 0xff}
	case "tinyproxy":
		return color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
	case "squid":
		return color.RGBA{0xc6, 0x28, 0x28, 0xff}
	}
	return black
}

func drawPanel(img *image.RGBA, r image.Rectangle, title, xlabel string, cs []*curve) {
	const left, right, top, bottom = 78, 24, 76, 64
	area := image.Rect(r.Min.X+left, r.Min.Y+top, r.Max.X-right, r.Max.Y-bottom)
	drawText(img, r.Min.X+(r.Dx()-textWidth(title, 2))/2, r.Min.Y+14, title, 2, black)
	if len(cs) == 0 {
		drawText(img, area.Min.X+10, area.Min.Y+10, "not measured in this run", 2, black)
		return
	}
	// Ranges, in log10.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, c := range cs {
		for _, p := range c.points {
			xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
			for _, v := range []float64{p.p50, p.p99} {
				if v > 0 && !math.IsNaN(v) {
					ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
				}
			}
		}
	}
	lx0, lx1 := math.Log10(xmin)-0.15, math.Log10(xmax)+0.15
	ly0, ly1 := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if ly1-ly0 < 1 {
		ly1 = ly0 + 1
	}
	px := func(x float64) int {
		return area.Min.X + int((math.Log10(x)-lx0)/(lx1-lx0)*float64(area.Dx()))
	}
	py := func(y float64) int {
		return area.Max.Y - int((math.Log10(y)-ly0)/(ly1-ly0)*float64(area.Dy()))
	}
	// Grid and y labels: a line per power of ten, faint lines between.
	for k := ly0; k <= ly1; k++ {
		base := math.Pow(10, k)
		y := py(base)
		hline(img, area.Min.X, area.Max.X, y, gridMajor)
		label := trimNum(base)
		if base < 0.01 {
			label = fmt.Sprintf("%g", base)
		}
		drawText(img, area.Min.X-8-textWidth(label, 2), y-7, label, 2, black)
		if k < ly1 {
			for m := 2.0; m <= 9; m++ {
				hline(img, area.Min.X, area.Max.X, py(m*base), gridMinor)
			}
		}
	}
	// x ticks at the measured levels.
	for _, p := range cs[0].points {
		x := px(p.x)
		vline(img, x, area.Min.Y, area.Max.Y, gridMinor)
		label := trimNum(p.x)
		drawText(img, x-textWidth(label, 2)/2, area.Max.Y+8, label, 2, black)
	}
	// Axes.
	hline(img, area.Min.X, area.Max.X, area.Max.Y, black)
	vline(img, area.Min.X, area.Min.Y, area.Max.Y, black)
	drawText(img, area.Min.X+(area.Dx()-textWidth(xlabel+" (log)", 2))/2, area.Max.Y+34, xlabel+" (log)", 2, black)
	drawText(img, r.Min.X+6, area.Min.Y-36, "ms (log)", 2, black)
	// Series.
	for _, c := range cs {
		col := seriesColor(c.name)
		for i := 1; i < len(c.points); i++ {
			a, b := c.points[i-1], c.points[i]
			line(img, px(a.x), py(a.p50), px(b.x), py(b.p50), col, false)
			line(img, px(a.x), py(a.p99), px(b.x), py(b.p99), col, true)
		}
		for _, p := range c.points {
			dot(img, px(p.x), py(p.p50), 4, col)
			dot(img, px(p.x), py(p.p99), 3, col)
		}
	}
	// Legend, top left inside the plot area.
	ly := area.Min.Y + 10
	for _, c := range cs {
		col := seriesColor(c.name)
		line(img, area.Min.X+12, ly+6, area.Min.X+40, ly+6, col, false)
		drawText(img, area.Min.X+48, ly, c.name, 2, col)
		ly += 22
	}
	drawText(img, area.Min.X+12, ly+2, "solid p50, dashed p99", 1, black)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// line draws a 3-pixel-wide line, optionally dashed (8 on, 6 off).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	dx, dy := float64(x1-x0), float64(y1-y0)
	n := int(math.Max(math.Abs(dx), math.Abs(dy)))
	if n == 0 {
		n = 1
	}
	length := math.Hypot(dx, dy)
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		if dashed && int(t*length)%14 >= 8 {
			continue
		}
		x := x0 + int(math.Round(t*dx))
		y := y0 + int(math.Round(t*dy))
		for ox := -1; ox <= 1; ox++ {
			for oy := -1; oy <= 1; oy++ {
				img.Set(x+ox, y+oy, c)
			}
		}
	}
}

func dot(img *image.RGBA, x, y, rad int, c color.Color) {
	for ox := -rad; ox <= rad; ox++ {
		for oy := -rad; oy <= rad; oy++ {
			if ox*ox+oy*oy <= rad*rad {
				img.Set(x+ox, y+oy, c)
			}
		}
	}
}
